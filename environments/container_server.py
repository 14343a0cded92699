"""pinpoint's command server, run inside each container by DockerRuntime (stdlib only, Python 3.5+).

Why: a `docker exec` costs ~100+ ms of engine work per command on a loaded machine; a resident server that forks a
fresh `bash -c` per request answers in a few ms, and commands stay stateless (nothing but the process persists).
It listens on a Unix socket in a container-internal tmpfs (the host reaches it through /proc/<pid>/root, so the
container has no writable host path). Each connection carries one request: a JSON line (`op` = run | read | write |
snapshot | reset | stop), then for `write` exactly `size` payload bytes. Replies are frames: one kind byte
(b"O" output/data, b"X" final JSON status), a 4-byte big-endian length, the payload.
`run` starts the command in its own session with an empty capability bounding set (the server keeps the few it needs,
commands get none unless asked: `keep_caps`) and kills that process group on timeout, when the command ends, and when
the client goes away; when no command is left running, every other process in the container but PID 1 and the server
is killed too (a `setsid` or double-fork escapes the group, not the sweep: commands are stateless). The status says
whether the memory cgroup's OOM killer or the pids limit struck during the command.

`snapshot` copies the working tree (all but `.git`) to a pristine store and records each entry's stat; `reset` then
restores the tree without starting a single process in the common case: entries whose stat changed are copied back,
new ones deleted, missing ones recreated. Only when git's own state moved (index, HEAD, reflog) does it also run
`git reset --hard <base>`. Forking git costs tens of ms on a loaded machine; this is what keeps reset() fast.
"""

import contextlib
import ctypes
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

#: running commands (pid -> Popen), so `stop` and the sweep know what is still wanted
RUNNING = {}
RUNNING_LOCK = threading.Lock()
#: cgroup v1 and v2 counters: (file, line key) of OOM kills and of forks refused by the pids limit
OOM_COUNTERS = (("/sys/fs/cgroup/memory/memory.oom_control", "oom_kill"), ("/sys/fs/cgroup/memory.events", "oom_kill"))
PIDS_COUNTERS = (("/sys/fs/cgroup/pids/pids.events", "max"), ("/sys/fs/cgroup/pids.events", "max"))


def counter(candidates):
    """The first readable cgroup counter of `candidates`, or None (no such cgroup here)."""
    for path, key in candidates:
        try:
            with open(path) as f:
                for line in f:
                    fields = line.split()
                    if len(fields) == 2 and fields[0] == key:
                        return int(fields[1])
        except (OSError, ValueError):
            continue
    return None


def last_cap():
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 63


#: resolved before any fork: the child of a threaded server must not import or open files
PRCTL = ctypes.CDLL(None, use_errno=True).prctl
LAST_CAP = last_cap()


def drop_capabilities(keep):
    """In the command's child before exec: empty the bounding set but `keep`, so the exec'd shell (uid 0) gets
    no capability at all; needs CAP_SETPCAP, which the server has and its commands lose here."""
    for cap in range(LAST_CAP + 1):
        if cap not in keep:
            PRCTL(24, cap, 0, 0, 0)  # PR_CAPBSET_DROP; fails harmlessly for caps already gone


#: (uid, gid, home) commands run as, once `own` gave them the tree; None: uid 0 without capabilities
OWNER = None


def become_command(keep):
    """The command's child before exec: no capabilities, and the command user's uid when one is set."""
    drop_capabilities(keep)
    if OWNER:
        os.setgroups([])
        os.setgid(OWNER[1])
        os.setuid(OWNER[0])  # from uid 0 to another: permitted and effective sets are cleared too


def chown_tree(top, uid, gid):
    """Give `top` and everything under it (symlinks themselves) to uid:gid; entries already theirs are skipped."""
    def fix(path):
        st = os.lstat(path)
        if (st.st_uid, st.st_gid) == (uid, gid):
            return 0
        os.lchown(path, uid, gid)
        return 1

    changed = fix(top)
    for parent, dirs, files in os.walk(top):
        for name in dirs + files:
            changed += fix(os.path.join(parent, name))
    return changed


def own(req):
    """Hand the working tree (and .git) to the command user, and give it a home folder."""
    global OWNER
    uid, gid, home = int(req["uid"]), int(req["gid"]), req["home"]
    if not os.path.isdir(home):
        os.makedirs(home)
    os.chown(home, uid, gid)
    changed = chown_tree(req["root"], uid, gid)
    OWNER = (uid, gid, home)
    return {"ok": True, "changed": changed}


def send(conn, kind, data):
    conn.sendall(kind + struct.pack(">I", len(data)) + data)


def recv_request(conn):
    buf = b""
    while b"\n" not in buf:
        chunk = conn.recv(65536)
        if not chunk:
            raise EOFError("client closed before sending a request")
        buf += chunk
    line, rest = buf.split(b"\n", 1)
    header = json.loads(line.decode("utf-8"))
    size = header.get("size", 0)
    parts, have = [rest], len(rest)
    while have < size:
        chunk = conn.recv(min(1 << 20, size - have))
        if not chunk:
            raise EOFError("client closed during the payload")
        parts.append(chunk)
        have += len(chunk)
    return header, b"".join(parts)


def kill_group(pgid):
    with contextlib.suppress(OSError):
        os.killpg(pgid, signal.SIGKILL)


def pump(proc, conn):
    fd = proc.stdout.fileno()
    try:
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            send(conn, b"O", chunk)
    except OSError:  # the client went away: nobody waits for this command any more
        kill_group(proc.pid)


def run(conn, req):
    env = dict(os.environ)
    env.update(req.get("env") or {})
    keep = set(req.get("keep_caps") or ())
    if OWNER:
        env["HOME"] = OWNER[2]
    oom, pids = counter(OOM_COUNTERS), counter(PIDS_COUNTERS)
    with RUNNING_LOCK:
        proc = subprocess.Popen(["bash", "-c", req["cmd"]], cwd=req.get("cwd") or None, env=env,
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                start_new_session=True, preexec_fn=lambda: become_command(keep))
        RUNNING[proc.pid] = proc
    reader = threading.Thread(target=pump, args=(proc, conn))
    reader.daemon = True
    reader.start()
    timed_out = False
    try:
        proc.wait(timeout=req.get("timeout"))
    except subprocess.TimeoutExpired:
        timed_out = True
    kill_group(proc.pid)
    proc.wait()
    with RUNNING_LOCK:
        RUNNING.pop(proc.pid, None)
        swept = sweep() if not RUNNING else 0
    reader.join(10)
    return {"exit": None if timed_out else proc.returncode, "timed_out": timed_out, "swept": swept,
            "oom_killed": grew(oom, counter(OOM_COUNTERS)), "pids_limit_hit": grew(pids, counter(PIDS_COUNTERS))}


def grew(before, after):
    return before is not None and after is not None and after > before


def sweep():
    """Kill every process but PID 1, this server and its parent; repeat until none is left (a fork bomb forks
    while it is being killed). Returns how many were killed."""
    keep = {1, os.getpid(), os.getppid()}
    keep.update(RUNNING)
    killed = 0
    for _ in range(200):
        alive = [pid for pid in others(keep)]
        if not alive:
            break
        for pid in alive:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
                killed += 1
        time.sleep(0.005)
    return killed


def others(keep):
    """Live processes (not zombies) outside `keep` and outside the groups of running commands."""
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in keep:
            continue
        try:
            with open("/proc/" + name + "/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z" and int(fields[2]) not in RUNNING:  # fields[2]: the process group
            yield int(name)


def stop(req):
    """Kill every running command and whatever it left: the host's watchdog asks when a limit is reached."""
    with RUNNING_LOCK:
        for pid in list(RUNNING):
            kill_group(pid)
        RUNNING.clear()
        return {"ok": True, "swept": sweep()}


def read(conn, req):
    with open(req["path"], "rb") as f:
        send(conn, b"O", f.read())
    return {"ok": True}


def write(req, payload):
    parent = os.path.dirname(req["path"])
    if parent and not os.path.isdir(parent):
        os.makedirs(parent)
    with open(req["path"], "wb") as f:  # truncating in place keeps the file's mode and owner
        f.write(payload)
    return {"ok": True}


class Tree:
    """The base state of one working tree: a manifest of stats plus pristine copies of its files."""

    def __init__(self, root, store, base, limit_bytes):
        self.root, self.store, self.base = root, store, base
        self.gitdir = os.path.join(root, ".git")
        if os.path.exists(store):
            shutil.rmtree(store)
        os.makedirs(store)
        self.dirs, self.files, self.links = {"": os.lstat(root).st_mode}, {}, {}
        total = 0
        for rel, path, kind, st in self.walk():
            if kind == "d":
                self.dirs[rel] = st.st_mode
            elif kind == "l":
                self.links[rel] = os.readlink(path)
            else:
                total += st.st_size
                if total > limit_bytes:
                    raise ValueError("working tree larger than " + str(limit_bytes) + " bytes")
                copy = os.path.join(store, rel)
                if not os.path.isdir(os.path.dirname(copy)):
                    os.makedirs(os.path.dirname(copy))
                shutil.copyfile(path, copy, follow_symlinks=False)
                self.files[rel] = self.sig(st)
        self.git_sig = self.git_signature()
        self.git_modes = self.modes_under(self.gitdir)

    @staticmethod
    def modes_under(top):
        """Mode of every entry under `top` (git's folder is small: tens of entries in these images)."""
        modes = {}
        for parent, dirs, files in os.walk(top):
            for name in dirs + files:
                path = os.path.join(parent, name)
                modes[path] = os.lstat(path).st_mode
        modes[top] = os.lstat(top).st_mode if os.path.isdir(top) else None
        return modes

    def restore_git_modes(self):
        """Undo chmod games inside .git (a read-only or unreadable .git breaks diff() for commands without
        capabilities); entries git adds later are left to git."""
        changed = 0
        for path, mode in self.git_modes.items():
            with contextlib.suppress(OSError):
                if mode is not None and not stat_is_link(mode) and os.lstat(path).st_mode != mode:
                    os.chmod(path, mode & 0o7777)
                    changed += 1
        return changed

    @staticmethod
    def sig(st):
        return (st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)

    def walk(self):
        """(relative path, path, kind d|l|f, lstat) for every entry under root but the top-level .git."""
        stack = [""]
        while stack:
            rel_dir = stack.pop()
            for entry in os.scandir(os.path.join(self.root, rel_dir)):
                rel = os.path.join(rel_dir, entry.name) if rel_dir else entry.name
                if rel == ".git":
                    continue
                st = entry.stat(follow_symlinks=False)
                kind = "l" if entry.is_symlink() else "d" if entry.is_dir(follow_symlinks=False) else "f"
                yield rel, entry.path, kind, st
                if kind == "d":
                    stack.append(rel)

    def git_signature(self):
        sig = []
        for name in ("index", "HEAD", "logs/HEAD", "packed-refs"):
            try:
                st = os.stat(os.path.join(self.gitdir, name))
                sig.append((name, st.st_size, st.st_mtime_ns, st.st_ino))
            except OSError:
                sig.append((name, None))
        return sig

    def reset(self):
        changed = 0
        removed = set()
        for rel, path, kind, st in list(self.walk()):
            if self.under(rel, removed):
                continue
            expected = "d" if rel in self.dirs else "l" if rel in self.links else "f" if rel in self.files else None
            if expected != kind or (kind == "l" and os.readlink(path) != self.links[rel]):
                remove(path, kind)
                if kind == "d":
                    removed.add(rel)
                changed += 1
            elif kind == "f" and self.sig(st) != self.files[rel]:
                self.restore_file(rel)
                changed += 1
        for rel in sorted(self.dirs):
            path = os.path.join(self.root, rel)
            if not os.path.isdir(path) or os.path.islink(path):
                os.makedirs(path, exist_ok=True)
            if os.lstat(path).st_mode != self.dirs[rel]:  # chmod games on folders (000, a-w) are undone too
                os.chmod(path, self.dirs[rel] & 0o7777)
                changed += 1
        for rel, target in self.links.items():
            path = os.path.join(self.root, rel)
            if not os.path.islink(path):
                os.symlink(target, path)
                changed += 1
        for rel in self.files:
            if not os.path.lexists(os.path.join(self.root, rel)):
                self.restore_file(rel)
                changed += 1
        changed += self.restore_git_modes()
        git_reset = self.git_signature() != self.git_sig
        if git_reset:
            subprocess.check_call(["git", "-c", "safe.directory=*", "reset", "-q", "--hard", self.base],
                                  cwd=self.root, stdin=subprocess.DEVNULL)
            self.git_sig = self.git_signature()
        if OWNER and (changed or git_reset):  # what the server (uid 0) recreated belongs to the command user
            chown_tree(self.root, OWNER[0], OWNER[1])
            self.refresh_signatures()
        return {"ok": True, "changed": changed, "git_reset": git_reset}

    @staticmethod
    def under(rel, folders):
        """Whether `rel` lies inside one of `folders`."""
        parent = os.path.dirname(rel)
        while parent:
            if parent in folders:
                return True
            parent = os.path.dirname(parent)
        return False

    def refresh_signatures(self):
        """After a chown (which moves ctime) the recorded stats of restored files must follow."""
        for rel in self.files:
            with contextlib.suppress(OSError):
                self.files[rel] = self.sig(os.lstat(os.path.join(self.root, rel)))
        self.git_sig = self.git_signature()

    def restore_file(self, rel):
        path = os.path.join(self.root, rel)
        mode, _, mtime_ns, _, _ = self.files[rel]
        if os.path.lexists(path) and not os.path.isfile(path) or os.path.islink(path):
            remove(path, "d" if os.path.isdir(path) and not os.path.islink(path) else "f")
        shutil.copyfile(os.path.join(self.store, rel), path)  # in place: keeps the inode and the owner
        os.chmod(path, mode & 0o7777)
        os.utime(path, ns=(mtime_ns, mtime_ns))
        self.files[rel] = self.sig(os.lstat(path))


def stat_is_link(mode):
    return (mode & 0o170000) == 0o120000


def remove(path, kind):
    if kind == "d":
        shutil.rmtree(path)
    else:
        os.unlink(path)


TREES = {}


def snapshot(req):
    try:
        TREES[req["root"]] = Tree(req["root"], req["store"], req["base"], req.get("limit_bytes", 1 << 30))
    except (ValueError, OSError) as exc:
        TREES.pop(req["root"], None)
        return {"ok": False, "message": str(exc)}
    tree = TREES[req["root"]]
    return {"ok": True, "files": len(tree.files)}


def reset(req):
    tree = TREES.get(req["root"])
    if tree is None:
        return {"ok": False, "message": "no snapshot of " + req["root"]}
    try:
        return tree.reset()
    except (OSError, subprocess.CalledProcessError) as exc:
        return {"ok": False, "message": str(exc)}


def handle(conn):
    try:
        req, payload = recv_request(conn)
        try:
            if req["op"] == "run":
                status = run(conn, req)
            elif req["op"] == "read":
                status = read(conn, req)
            elif req["op"] == "write":
                status = write(req, payload)
            elif req["op"] == "snapshot":
                status = snapshot(req)
            elif req["op"] == "reset":
                status = reset(req)
            elif req["op"] == "stop":
                status = stop(req)
            elif req["op"] == "own":
                status = own(req)
            else:
                status = {"error": "ValueError", "message": "unknown op {!r}".format(req["op"])}
        except OSError as exc:
            status = {"error": type(exc).__name__, "errno": exc.errno, "message": str(exc)}
        send(conn, b"X", json.dumps(status).encode("utf-8"))
    except (OSError, EOFError, ValueError):
        pass
    finally:
        conn.close()


def main(path):
    tmp = path + ".tmp"
    for stale in (path, tmp):
        if os.path.exists(stale):
            os.unlink(stale)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(tmp)
    os.chmod(tmp, 0o777)
    server.listen(128)
    os.rename(tmp, path)  # the socket appears only once it accepts: its presence means "ready"
    while True:
        conn, _ = server.accept()
        worker = threading.Thread(target=handle, args=(conn,))
        worker.daemon = True
        worker.start()


if __name__ == "__main__":
    main(sys.argv[1])
