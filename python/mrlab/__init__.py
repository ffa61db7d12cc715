"""mrlab: script live labs from Python (stdlib only).

    import mrlab
    with mrlab.up("labs/examples/b2b.yaml", name="demo") as lab:
        print(lab["h0"].cmd("ping -c 1 " + lab["h1"].addr))
        print(lab.ping_all())            # percent lost
        lab.plane(1, "down")
        print(lab.perf("h0", "h1", size="64KiB", duration=1)["goodput_bps"])

The control API it speaks is docs/control-api.md.
"""

from .control import Control, LabError
from .lab import Host, Lab, attach, parse_size, running, up

__all__ = ["Control", "Host", "Lab", "LabError", "attach", "parse_size", "running", "up"]
