"""Tests of the Python API that need no root: a fake mrlab command and a
fake control socket stand in for a lab."""

import http.server
import json
import os
import socketserver
import stat
import sys
import tempfile
import textwrap
import threading
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import mrlab  # noqa: E402


class ParseSizeTest(unittest.TestCase):
    def test_table(self):
        for text, want in [(65536, 65536), ("9000", 9000), ("9000B", 9000), ("64K", 65536), ("64k", 65536),
                           ("64kb", 65536), ("64KiB", 65536), ("1MB", 1 << 20), ("1.5MiB", 3 << 19),
                           (" 2 g ", 2 << 30), ("0", 0)]:
            with self.subTest(text=text):
                self.assertEqual(mrlab.parse_size(text), want)

    def test_refused(self):
        for text in ["", "k", "1x", "-1", "nan", "inf", "2TiB", -5, "1e400"]:
            with self.subTest(text=text):
                with self.assertRaises(ValueError):
                    mrlab.parse_size(text)


class _Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def address_string(self):
        return "unix"

    def _reply(self, code, body):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self.server.seen.append(("GET", self.path, self.headers.get("Host"), None))
        if self.path == "/status":
            self._reply(200, {"lab": "demo", "engine": {"links": [{"name": "h0-p0", "up": True, "drops": 0}]}})
        else:
            self._reply(404, b"not json")

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"null")
        self.server.seen.append(("POST", self.path, self.headers.get("Host"), body))
        if self.path == "/fault" and body.get("name") == "nope":
            self._reply(400, {"error": "no link nope"})
        elif self.path == "/perf":
            self._reply(200, {"request": body, "status": "ok", "goodput_bps": 1e9})
        elif self.path == "/down":
            self._reply(503, {"error": "lab demo is stopping"})
        else:
            self._reply(200, {})


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


# A fake mrlab: up writes a state file and prints what mrlab up prints,
# exec runs the command after "--" (ping answers from a canned table), ls
# and down do what they say.
FAKE_MRLAB = textwrap.dedent("""\
    #!/bin/sh
    echo "$@" >> "$FAKE_LOG"
    sub=$1; shift
    case $sub in
    up)
        printf '{"lab":"demo","socket":"%s","hosts":[{"name":"h0","addr":"10.0.0.1","namespace":"mrl-demo-h0"},{"name":"h1","addr":"10.0.0.2","namespace":"mrl-demo-h1"},{"name":"h2","addr":"10.0.0.3","namespace":"mrl-demo-h2"}]}' "$FAKE_SOCK" > "$MRLAB_RUN_DIR/demo.json"
        echo "lab demo up (pid 42, log $MRLAB_RUN_DIR/demo.log)"
        ;;
    ls) echo '[{"name":"demo","owner":0}]' ;;
    down) rm -f "$MRLAB_RUN_DIR/demo.json"; echo "lab demo down" ;;
    exec)
        while [ "$1" != "--" ]; do shift; done; shift
        if [ "$1" = ping ]; then
            for last; do :; done
            if [ "$last" = 10.0.0.3 ]; then echo "2 packets transmitted, 0 received, 100% packet loss"; exit 1; fi
            echo "2 packets transmitted, 2 received, 0% packet loss"; exit 0
        fi
        exec "$@" ;;
    *) echo "fake mrlab: $sub?" >&2; exit 2 ;;
    esac
""")


class LabTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="mrlab-py-")
        self.sock = os.path.join(self.dir, "demo.sock")
        self.srv = _Server(self.sock, _Handler)
        self.srv.seen = []
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()
        self.addCleanup(self.srv.server_close)
        self.addCleanup(self.srv.shutdown)
        self.bin = os.path.join(self.dir, "mrlab")
        with open(self.bin, "w") as f:
            f.write(FAKE_MRLAB)
        os.chmod(self.bin, stat.S_IRWXU)
        self.log = os.path.join(self.dir, "log")
        os.environ.update(FAKE_LOG=self.log, FAKE_SOCK=self.sock, MRLAB_RUN_DIR=self.dir)

    def calls(self):
        with open(self.log) as f:
            return f.read().splitlines()

    def test_up_exec_fault_perf_down(self):
        with mrlab.up("labs/examples/b2b.yaml", name="demo", mrlab=self.bin, args=["--max-rate", "100mbit"]) as lab:
            self.assertEqual(list(lab.hosts), ["h0", "h1", "h2"])
            self.assertEqual(lab["h1"].addr, "10.0.0.2")
            self.assertEqual(lab["h0"].cmd("echo hi; echo err >&2"), "hi\nerr\n")
            self.assertEqual(lab["h0"].run(["false"]).returncode, 1)
            self.assertEqual(lab.status()["engine"]["links"][0]["name"], "h0-p0")
            lab.plane(1, "down")
            lab.link("h0-p0", "impair", "loss", "1%")
            lab.link("h0-p0:ab", "impair", "delay", "10ms")
            lab.link("h1-p0", "impair", "delay", "1ms", dir="ba")
            with self.assertRaises(mrlab.LabError) as e:
                lab.link("nope", "down")
            self.assertEqual(e.exception.status, 400)
            self.assertIn("no link nope", str(e.exception))
            with self.assertRaises(mrlab.LabError):
                lab.fault("host", "h0", "down")
            res = lab.perf("h0", lab["h1"], size="64KiB", duration=0.5, verify=True)
            self.assertEqual(res["request"], {"from": "h0", "to": "h1", "op": "write", "size": 65536, "count": 0,
                                              "duration_ns": 500000000, "depth": 0, "verify": True})
            with self.assertRaises(mrlab.LabError):
                lab.host("h9")
        seen = [(m, p, b) for m, p, _, b in self.srv.seen]
        self.assertIn(("POST", "/fault", {"target": "plane", "name": "1", "action": "down"}), seen)
        self.assertIn(("POST", "/fault", {"target": "link", "name": "h0-p0", "action": "impair", "impair": ["loss", "1%"]}), seen)
        self.assertIn(("POST", "/fault", {"target": "link", "name": "h0-p0", "action": "impair", "impair": ["delay", "10ms"], "dir": "ab"}), seen)
        self.assertIn(("POST", "/fault", {"target": "link", "name": "h1-p0", "action": "impair", "impair": ["delay", "1ms"], "dir": "ba"}), seen)
        self.assertTrue(all(h == "lab" for _, _, h, _ in self.srv.seen))
        calls = self.calls()
        self.assertEqual(calls[0], "up --run-dir %s --name demo --max-rate 100mbit labs/examples/b2b.yaml" % self.dir)
        self.assertEqual(calls[-1], "down --run-dir %s demo" % self.dir)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "demo.json")))

    def test_ping_all(self):
        lab = mrlab.up("b2b", mrlab=self.bin)
        lost, rows = lab.ping_all(count=2, details=True)
        # 6 ordered pairs; the 2 towards h2 lose everything.
        self.assertEqual(len(rows), 6)
        self.assertAlmostEqual(lost, 100 * 2 / 6)
        self.assertIn(("h0", "h2", 2, 0), rows)
        self.assertIn(("h2", "h0", 2, 2), rows)

    def test_errors(self):
        with self.assertRaises(mrlab.LabError) as e:
            mrlab.attach("gone", run_dir=self.dir, mrlab=self.bin)
        self.assertIn("not running", str(e.exception))
        with self.assertRaises(mrlab.LabError) as e:
            mrlab.up("x", mrlab=os.path.join(self.dir, "missing"))
        c = mrlab.Control("demo", self.sock)
        with self.assertRaises(mrlab.LabError) as e:
            c.call("GET", "/nothing")
        self.assertEqual(e.exception.status, 404)
        with self.assertRaises(mrlab.LabError) as e:
            c.down()
        self.assertEqual(e.exception.status, 503)
        with self.assertRaises(mrlab.LabError) as e:
            mrlab.Control("demo", os.path.join(self.dir, "no.sock")).status()
        self.assertIsNone(e.exception.status)
        self.assertEqual(mrlab.running(run_dir=self.dir, mrlab=self.bin), [{"name": "demo", "owner": 0}])


if __name__ == "__main__":
    unittest.main()
