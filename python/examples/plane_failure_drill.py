#!/usr/bin/env python3
"""A plane-failure drill, scripted: lesson 7's live run from Python.

Brings up the tutorial's two-plane lab, checks every host reaches every
other, starts a verified RDMA WRITE transfer between h0 and h1, takes
plane 1 down under it, and checks the transfer still delivered every byte
(MetaRoCE moves the connection's paths to plane 0) and that plane 0 carried
what was left. The failed plane drops whatever was on it when it failed; a
NIC that learns its port is down sends nothing more there, so those drops
can be none and are printed, not asserted. Exits 0 when the drill passes,
1 when it fails.

    go build -o bin/mrlab ./cmd/mrlab && go build -o bin/rdma-write ./examples/rdma-write
    sudo PYTHONPATH=python python3 python/examples/plane_failure_drill.py \\
        --mrlab bin/mrlab --rdma-write bin/rdma-write
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

import mrlab

HERE = os.path.dirname(os.path.abspath(__file__))
LAB = os.path.join(HERE, "..", "..", "labs", "examples", "tutorial", "07-your-program.yaml")


def wait_for(path, pattern, proc, timeout=15.0):
    """Waits until the file at path matches pattern; fails if proc ends."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(path) as f:
            if re.search(pattern, f.read(), re.M):
                return
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    with open(path) as f:
        raise SystemExit("drill: %r never appeared in %s:\n%s" % (pattern, path, f.read()))


def wait_completed(lab, host, n, proc, timeout=60.0):
    """Waits until host's verbs program has completed n work requests (as
    the lab's status counts them) and returns how many it has."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        for h in lab.status()["hosts"]:
            if h["name"] == host:
                done = sum(v["completed"] for v in h.get("verbs") or [])
                if done >= n:
                    return done
        time.sleep(0.02)
    raise SystemExit("drill: %s never completed %d work requests" % (host, n))


def link_bytes(lab, name):
    """The bytes the lab's link name has carried so far."""
    for l in lab.status()["engine"]["links"]:
        if l["name"] == name:
            return l["bytes"]
    raise SystemExit("drill: the lab has no link %s" % name)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mrlab", help="the mrlab binary (default: $MRLAB or PATH)")
    ap.add_argument("--rdma-write", required=True, help="examples/rdma-write, built")
    ap.add_argument("--name", default="drill%d" % (os.getpid() % 100000), help="lab name")
    ap.add_argument("--messages", type=int, default=400, help="1 MiB WRITEs to send")
    ap.add_argument("--run-dir", help="directory of running labs (default: $MRLAB_RUN_DIR or /run/mrlab)")
    a = ap.parse_args()
    rdma_write = os.path.abspath(a.rdma_write)
    work = tempfile.mkdtemp(prefix="mrlab-drill-")
    failures = []

    with mrlab.up(LAB, name=a.name, mrlab=a.mrlab, run_dir=a.run_dir) as lab:
        h0, h1 = lab["h0"], lab["h1"]
        print("lab %s up: %s" % (lab.name, ", ".join("%s %s" % (h.name, h.addr) for h in lab.hosts.values())))
        lost = lab.ping_all()
        print("ping_all: %.0f%% lost" % lost)
        if lost:
            failures.append("ping_all lost %.0f%%" % lost)

        server_out, client_out = os.path.join(work, "server.txt"), os.path.join(work, "client.txt")
        with open(server_out, "w") as so, open(client_out, "w") as co:
            server = h1.popen([rdma_write, "--listen"], stdout=so, stderr=subprocess.STDOUT)
            wait_for(server_out, r"listening", server)
            client = h0.popen([rdma_write, "--to", h1.addr, "-n", str(a.messages)], stdout=co, stderr=subprocess.STDOUT)
            wait_for(client_out, r"connected", client)
            # Fail the plane mid-transfer, once a quarter of the WRITEs
            # have completed: data is then in flight on both planes.
            done = wait_completed(lab, "h0", a.messages // 4, client)
            lab.plane(1, "down")
            p0_at_failure = link_bytes(lab, "h0-p0")
            print("plane 1 down after %d%% of the transfer" % (100 * done // a.messages))
            rc_client, rc_server = client.wait(timeout=120), server.wait(timeout=30)
        out = open(client_out).read()
        print(out, end="")
        if rc_client != 0 or rc_server != 0:
            failures.append("rdma-write exited %d (client), %d (server)" % (rc_client, rc_server))
        want = "data verified: %d messages, %d bytes" % (a.messages, a.messages << 20)
        if want not in out:
            failures.append("client did not print %r" % want)

        links = {l["name"]: l for l in lab.status()["engine"]["links"]}
        p1 = links.get("h0-p1")
        print("h0-p1: %s, %d drops" % ("up" if p1 and p1["up"] else "DOWN", p1["drops"] if p1 else -1))
        if not p1 or p1["up"]:
            failures.append("h0-p1 is not down: %r" % (p1,))
        p0_after = links["h0-p0"]["bytes"] - p0_at_failure
        print("h0-p0: %d bytes after the failure" % p0_after)
        # What was left of the WRITEs crossed plane 0 (half of it, for
        # margin: WRITEs past the count read at the failure were in flight).
        if p0_after < ((a.messages - done) << 20) // 2:
            failures.append("h0-p0 carried %d bytes after the failure, want the rest of the transfer" % p0_after)
        lab.plane(1, "up")
        lost = lab.ping_all()
        print("plane 1 up; ping_all: %.0f%% lost" % lost)
        if lost:
            failures.append("after repair ping_all lost %.0f%%" % lost)

    for f in failures:
        print("drill FAILED: " + f, file=sys.stderr)
    print("drill %s" % ("FAILED" if failures else "passed"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
