"""Live labs from Python: bring one up, run programs in its hosts, fail and
impair its fabric, measure, tear it down.

Everything goes through the mrlab command (up, exec, down) and the lab's
control socket (status, fault, perf), so a script sees exactly what a user
at the shell sees. Needs root, as the mrlab commands do.
"""

import concurrent.futures
import json
import math
import os
import re
import shlex
import shutil
import subprocess

from .control import Control, LabError

DEFAULT_RUN_DIR = "/run/mrlab"

_SIZE_UNITS = (("kib", 1 << 10), ("mib", 1 << 20), ("gib", 1 << 30),
               ("kb", 1 << 10), ("mb", 1 << 20), ("gb", 1 << 30),
               ("k", 1 << 10), ("m", 1 << 20), ("g", 1 << 30), ("b", 1))


def parse_size(s):
    """Reads a byte count as mrlab does (every unit a power of 1024, as tc
    reads sizes): 65536, "64K", "64KiB", "1MB", "1.5MiB"."""
    if isinstance(s, int) and not isinstance(s, bool):
        if s < 0:
            raise ValueError("size %d: negative" % s)
        return s
    t = str(s).strip()
    low, mult = t.lower(), 1
    for suffix, m in _SIZE_UNITS:
        if low.endswith(suffix):
            t, mult = t[: -len(suffix)].strip(), m
            break
    try:
        v = float(t)
    except ValueError:
        raise ValueError("size %r: want a number with an optional unit (B, K/KB/KiB, M/MB/MiB, G/GB/GiB)" % (s,)) from None
    if math.isnan(v) or math.isinf(v) or v < 0 or v * mult > 1 << 40:
        raise ValueError("size %r: out of range (0 to 1TiB)" % (s,))
    return int(round(v * mult))


def _mrlab_binary(mrlab):
    path = mrlab or os.environ.get("MRLAB") or shutil.which("mrlab")
    if not path:
        raise LabError("mrlab not found: put it on PATH, set $MRLAB, or pass mrlab=PATH")
    return path


def _run_dir(run_dir):
    return run_dir or os.environ.get("MRLAB_RUN_DIR") or DEFAULT_RUN_DIR


def _check(argv, timeout):
    """Runs a mrlab command; its stderr becomes the LabError's message."""
    try:
        p = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise LabError("%s: no answer within %ss" % (shlex.join(argv), timeout)) from e
    except OSError as e:
        raise LabError("running %s: %s" % (argv[0], e)) from e
    if p.returncode != 0:
        raise LabError("%s: %s" % (shlex.join(argv), (p.stderr or p.stdout).strip() or "exit status %d" % p.returncode))
    return p.stdout


def running(run_dir=None, mrlab=None):
    """The running labs, as `mrlab ls --json` lists them (name, owner,
    hosts, uptime, metrics)."""
    out = _check([_mrlab_binary(mrlab), "ls", "--json", "--run-dir", _run_dir(run_dir)], 30)
    return json.loads(out or "[]") or []


_UP_LINE = re.compile(r"^lab (\S+) up \(pid \d+", re.M)


def up(lab, name=None, run_dir=None, mrlab=None, args=(), timeout=60):
    """Brings a lab up in the background (`mrlab up`) and returns it.

    lab is a lab file or a built-in lab's name; name runs it under another
    name (so one file runs several times side by side); args are further
    `mrlab up` flags, e.g. ["--max-rate", "100mbit"]. Use it in a with
    statement to take the lab down however the block ends.
    """
    binary, rd = _mrlab_binary(mrlab), _run_dir(run_dir)
    argv = [binary, "up", "--run-dir", rd]
    if name:
        argv += ["--name", name]
    argv += list(args) + [str(lab)]
    out = _check(argv, timeout)
    m = _UP_LINE.search(out)
    if not m:
        raise LabError("%s: could not read the lab's name from its output: %r" % (shlex.join(argv), out[:200]))
    return attach(m.group(1), run_dir=rd, mrlab=binary)


def attach(name, run_dir=None, mrlab=None):
    """Returns a running lab by name, without starting anything."""
    rd = _run_dir(run_dir)
    path = os.path.join(rd, name + ".json")
    try:
        with open(path) as f:
            state = json.load(f)
    except FileNotFoundError:
        raise LabError("lab %s is not running (no %s)" % (name, path)) from None
    except (OSError, ValueError) as e:
        raise LabError("lab %s: reading %s: %s" % (name, path, e)) from e
    return Lab(name, state, rd, _mrlab_binary(mrlab))


class Host:
    """One lab host: a network namespace whose mr0 is its NIC."""

    def __init__(self, lab, name, addr, namespace):
        self.lab, self.name, self.addr, self.namespace = lab, name, addr, namespace

    def __repr__(self):
        return "<Host %s %s>" % (self.name, self.addr)

    def _argv(self, command):
        if isinstance(command, str):
            command = ["sh", "-c", command]
        return [self.lab.mrlab, "exec", "--run-dir", self.lab.run_dir, "--lab", self.lab.name, self.name, "--"] + list(command)

    def run(self, command, timeout=None, check=False, **kwargs):
        """Runs command (an argv list, or a string for sh -c) in the host
        and returns its subprocess.CompletedProcess (text output)."""
        kwargs.setdefault("capture_output", True)
        kwargs.setdefault("stdin", subprocess.DEVNULL)
        return subprocess.run(self._argv(command), text=True, timeout=timeout, check=check, **kwargs)

    def cmd(self, command, timeout=None):
        """Runs command in the host and returns what it printed (stdout then
        stderr), as Mininet's Host.cmd does; the exit status is not checked."""
        p = self.run(command, timeout=timeout)
        return p.stdout + p.stderr

    def popen(self, command, **kwargs):
        """Starts command in the host and returns its subprocess.Popen."""
        kwargs.setdefault("stdin", subprocess.DEVNULL)
        return subprocess.Popen(self._argv(command), **kwargs)

    def ping(self, other, count=1, timeout=1.0):
        """Pings another host (a Host, a host name or an address) and
        returns (sent, received)."""
        addr = other.addr if isinstance(other, Host) else self.lab.hosts[other].addr if other in self.lab.hosts else str(other)
        wait = max(1, int(math.ceil(timeout)))
        p = self.run(["ping", "-n", "-q", "-c", str(count), "-W", str(wait), "-i", "0.2", addr], timeout=count * (wait + 1) + 10)
        m = re.search(r"(\d+) packets transmitted, (\d+) (?:packets )?received", p.stdout)
        if not m:
            raise LabError("ping from %s to %s: %s" % (self.name, addr, (p.stderr or p.stdout).strip()))
        return int(m.group(1)), int(m.group(2))


class Lab:
    """A running live lab. Its hosts are in .hosts (by name, in the lab's
    order); status, fault, perf and down go to its control socket."""

    def __init__(self, name, state, run_dir, mrlab):
        self.name, self.run_dir, self.mrlab = name, run_dir, mrlab
        self.state = state
        self.control = Control(name, state["socket"])
        self.hosts = {}
        for h in state.get("hosts") or []:
            self.hosts[h["name"]] = Host(self, h["name"], h.get("addr", ""), h.get("namespace", ""))

    def __repr__(self):
        return "<Lab %s: %d hosts>" % (self.name, len(self.hosts))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.down()
        return False

    def host(self, name):
        try:
            return self.hosts[name]
        except KeyError:
            raise LabError("lab %s has no host %r (hosts: %s)" % (self.name, name, ", ".join(self.hosts))) from None

    def __getitem__(self, name):
        return self.host(name)

    def status(self):
        """The lab's status (GET /status): hosts, links, switches, verbs
        clients, lag."""
        return self.control.status()

    def fault(self, target, name, action, *impair, dir=None):
        """Applies a fault: target is "link", "switch" or "plane"; action
        "down", "up" or, for links, "impair" with netem words
        (fault("link", "h0-p0", "impair", "loss", "1%")); dir="ab" or
        "ba" impairs one direction of the link only (a link name
        "h0-p0:ab" says the same)."""
        if target not in ("link", "switch", "plane"):
            raise LabError("fault: target %r: want link, switch or plane" % (target,))
        if target == "link" and ":" in str(name):
            name, d = str(name).split(":", 1)
            if dir and dir != d:
                raise LabError("fault: link %s: directions %r and %r" % (name, d, dir))
            dir = d
        self.control.fault(target, name, action, impair, dir)

    def link(self, name, action, *impair, dir=None):
        self.fault("link", name, action, *impair, dir=dir)

    def switch(self, name, action):
        self.fault("switch", name, action)

    def plane(self, n, action):
        self.fault("plane", str(n), action)

    def perf(self, src, dst, op="write", size=65536, count=0, duration=1.0, depth=0, transport=None, verify=False, timeout=None):
        """Runs a transport workload between two hosts' NICs (POST /perf)
        and returns its result when it ends: messages, bytes, elapsed_ns,
        goodput_bps, status ("ok", or why not: an error, or that the lab
        fell behind real time), timing and counters."""
        req = {"from": _name(src), "to": _name(dst), "op": op, "size": parse_size(size), "count": int(count),
               "duration_ns": 0 if count else int(duration * 1e9), "depth": int(depth), "verify": bool(verify)}
        if transport:
            req["transport"] = transport
        if timeout is None:
            timeout = 60 + (0 if count else duration * 2)
        return self.control.perf(req, timeout=timeout)

    def ping_all(self, count=1, timeout=1.0, workers=16, details=False):
        """Pings every host from every other, in parallel, as Mininet's
        pingAll does; returns the percentage of pings lost, or with
        details=True (percent, [(src, dst, sent, received), ...])."""
        pairs = [(a, b) for a in self.hosts.values() for b in self.hosts.values() if a is not b]
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            counts = list(pool.map(lambda ab: ab[0].ping(ab[1], count=count, timeout=timeout), pairs))
        sent = sum(s for s, _ in counts)
        got = sum(r for _, r in counts)
        lost = 100.0 * (sent - got) / sent if sent else 0.0
        if details:
            return lost, [(a.name, b.name, s, r) for (a, b), (s, r) in zip(pairs, counts)]
        return lost

    def down(self, timeout=60):
        """Takes the lab down (`mrlab down`): namespaces, devices, state."""
        _check([self.mrlab, "down", "--run-dir", self.run_dir, self.name], timeout)


def _name(h):
    return h.name if isinstance(h, Host) else str(h)
