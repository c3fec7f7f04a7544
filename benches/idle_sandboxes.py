"""What idle sandboxed servers cost: starts a daemon with N sandboxed scripted servers, waits
until every one is ready, lets them settle, then reads the CPU time the daemon and all its
descendants (sandbox helpers, inits, servers) used over a window, their wake-ups, and the memory
they hold privately.

    python3 benches/idle_sandboxes.py [--off] TOOLHOST SCRIPTED_SERVER [N ...]

Prints one line per N: start to all ready, CPU over the window as a share of one core, the
daemon's voluntary context switches a second (all its threads) and its descendants' per server
per second, and the private (anonymous) resident memory of the daemon's descendants per server. `--off` runs the same servers with `sandbox = "off"`.
The daemon runs sandboxes with `toolhost-sandbox` when it sits beside TOOLHOST (from the same
build), else with TOOLHOST itself. Standard library only.
"""

import json
import os
import subprocess
import sys
import tempfile
import time

SETTLE = 10.0
WINDOW = 10.0
TICKS = os.sysconf("SC_CLK_TCK")


def descendants(root):
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    text = f.read()
            except OSError:
                continue
            ppid = int(text[text.rfind(")") + 2 :].split()[1])
            children.setdefault(ppid, []).append(int(entry))
    found, stack = [], [root]
    while stack:
        pid = stack.pop()
        found.append(pid)
        stack.extend(children.get(pid, []))
    return found


def switches_of(pid):
    """Voluntary context switches of every thread of `pid` (each wake from a sleep counts one)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                for line in f:
                    if line.startswith("voluntary_ctxt_switches:"):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total


def usage(pids):
    """CPU ticks of `pids`; the voluntary switches of the first (the daemon, all its threads) and
    of the rest; and the private memory of all but the first, in one pass."""
    ticks = anon_kb = 0
    switches = [0, 0]
    for index, pid in enumerate(pids):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read()
            fields = fields[fields.rfind(")") + 2 :].split()
            ticks += int(fields[11]) + int(fields[12])
            switches[min(index, 1)] += switches_of(pid)
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("RssAnon:") and index > 0:
                        anon_kb += int(line.split()[1])
        except OSError:
            pass
    return ticks, switches, anon_kb


def run(toolhost, server, n, off):
    with tempfile.TemporaryDirectory() as d:
        with open(f"{d}/script.json", "w") as f:
            f.write("{}")
        extra = 'sandbox = "off"\n' if off else ""
        tables = "".join(f'[servers.s{i}]\ncommand = "{server}"\nargs = ["{d}/script.json"]\n{extra}' for i in range(n))
        with open(f"{d}/t.toml", "w") as f:
            f.write(f'[store]\npath = "catalog.db"\n[grpc]\nlisten = ["unix:{d}/t.sock"]\n{tables}')
        started = time.monotonic()
        daemon = subprocess.Popen([toolhost, "serve", "--config", f"{d}/t.toml"], stderr=subprocess.DEVNULL)
        try:
            while True:
                out = subprocess.run([toolhost, "servers", "--json", "--addr", f"unix:{d}/t.sock"], capture_output=True).stdout
                try:
                    servers = json.loads(out)
                except ValueError:
                    servers = []
                if len(servers) == n and all(s["state"] == "ready" for s in servers):
                    break
                time.sleep(0.2)
            ready = time.monotonic() - started
            time.sleep(SETTLE)
            pids = descendants(daemon.pid)
            # The window runs from the middle of one reading to the middle of the next: on a
            # saturated machine reading thousands of processes takes seconds, and so does a sleep.
            read0 = time.monotonic()
            ticks0, switches0, _ = usage(pids)
            read1 = time.monotonic()
            time.sleep(WINDOW)
            read2 = time.monotonic()
            ticks1, switches1, anon_kb = usage(pids)
            elapsed = (read2 + time.monotonic()) / 2 - (read0 + read1) / 2
            cpu = (ticks1 - ticks0) / TICKS / elapsed
            daemon_wakeups = (switches1[0] - switches0[0]) / elapsed
            wakeups = (switches1[1] - switches0[1]) / n / elapsed
            mode = "off" if off else "sandboxed"
            print(
                f"{n:>5} servers ({mode}): all ready in {ready:6.1f} s; idle: {cpu * 100:5.1f} % of a core, "
                f"the daemon {daemon_wakeups:5.1f} wake-ups a second, its servers' processes {wakeups:6.2f} per server; "
                f"{anon_kb / n:7.0f} kB private per server",
                flush=True,
            )
        finally:
            daemon.terminate()
            daemon.wait()


if __name__ == "__main__":
    args = sys.argv[1:]
    off = "--off" in args
    args = [arg for arg in args if arg != "--off"]
    for count in [int(arg) for arg in args[2:]] or [100]:
        run(args[0], args[1], count, off)
