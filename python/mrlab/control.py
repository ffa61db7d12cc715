"""The lab's control API: HTTP/JSON over its Unix socket (docs/control-api.md)."""

import http.client
import json
import socket


class LabError(Exception):
    """A lab refused a request, is not running, or a command failed.

    status is the HTTP status the lab answered with (400: the request was
    wrong, 503: the lab is stopping), or None when no lab answered.
    """

    def __init__(self, message, status=None):
        super().__init__(message)
        self.status = status


class _UnixConnection(http.client.HTTPConnection):
    """An HTTPConnection whose transport is a Unix stream socket."""

    def __init__(self, path, timeout):
        # The Host header is "lab", as mrlab's own client sends it.
        super().__init__("lab", timeout=timeout)
        self._path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.settimeout(self.timeout)
            s.connect(self._path)
        except OSError:
            s.close()
            raise
        self.sock = s


# Replies larger than this are refused: a lab answers status with a few
# hundred KiB at most, and a client must not be made to hold more.
MAX_REPLY = 64 << 20


class Control:
    """A client of one lab's control socket.

    Each call opens its own connection, so a Control may be shared by
    threads. timeout bounds each call in seconds (None: no bound; perf
    calls pass their own).
    """

    def __init__(self, lab, socket_path, timeout=30.0):
        self.lab = lab
        self.socket_path = socket_path
        self.timeout = timeout

    def call(self, method, path, body=None, timeout=None):
        """Sends one request and returns the decoded JSON reply."""
        conn = _UnixConnection(self.socket_path, timeout if timeout is not None else self.timeout)
        try:
            data = None if body is None else json.dumps(body).encode()
            headers = {"Content-Type": "application/json"} if data is not None else {}
            try:
                conn.request(method, path, body=data, headers=headers)
                resp = conn.getresponse()
                raw = resp.read(MAX_REPLY + 1)
            except (OSError, http.client.HTTPException) as e:
                raise LabError("lab %s: control socket %s: %s" % (self.lab, self.socket_path, e)) from e
            if len(raw) > MAX_REPLY:
                raise LabError("lab %s: reply to %s over %d bytes" % (self.lab, path, MAX_REPLY))
            try:
                reply = json.loads(raw) if raw else None
            except ValueError as e:
                raise LabError("lab %s: reply to %s is not JSON: %s" % (self.lab, path, e), resp.status) from e
            if resp.status != 200:
                msg = reply.get("error") if isinstance(reply, dict) else None
                raise LabError("lab %s: %s" % (self.lab, msg or "%s %s: HTTP %d" % (method, path, resp.status)), resp.status)
            return reply
        finally:
            conn.close()

    def status(self):
        return self.call("GET", "/status")

    def fault(self, target, name, action, impair=None, dir=None):
        req = {"target": target, "name": str(name), "action": action}
        if impair:
            req["impair"] = list(impair)
        if dir:
            req["dir"] = dir
        self.call("POST", "/fault", req)

    def perf(self, request, timeout=None):
        return self.call("POST", "/perf", request, timeout=timeout)

    def down(self):
        self.call("POST", "/down")
