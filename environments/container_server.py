"""pinpoint's command server, run inside each container by DockerRuntime (stdlib only, Python 3.5+; its wire
protocol, environments/wire.py, is shipped beside it).

Why: a `docker exec` costs ~100+ ms of engine work per command on a loaded machine; a resident server that forks a
fresh `bash -c` per request answers in about the cost of that fork, and commands stay stateless (nothing but the
process persists). It listens on a Unix socket in a container-internal tmpfs (the host reaches it through
/proc/<pid>/root, so the container has no writable host path).

One thread does everything (`Loop`): the listening socket, every connection, every command's output pipe, and
SIGCHLD through the signal wakeup fd, with the nearest command deadline as the select timeout; no thread per
request or per command, no polling. A connection carries requests one after another (the host keeps it open), each
answered by frames (`wire`: output or data, then the final status). `run` starts the command in its own session with no capability but `keep_caps` (the server's bounding set, see
`command_spawner`) and kills that process group on timeout, when the command ends, and when the client goes away;
when no command is left running, every other process in the container but PID 1 and the server is killed too (a
`setsid` or double-fork escapes the group, not the sweep: commands are stateless). The status says whether the
memory cgroup's OOM killer or the pids limit struck during the command.

`snapshot` copies the working tree (all but `.git`) to a pristine store and records each entry's stat; `reset` then
restores the tree without starting a single process in the common case: entries whose stat changed are copied back,
new ones deleted, missing ones recreated. Only when git's own state moved (index, HEAD, reflog) does it also run
`git reset --hard <base>`. Forking git costs tens of ms on a loaded machine; this is what keeps reset() fast.
"""

import contextlib
import ctypes
import fnmatch
import hashlib
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import time

if __name__ == "__main__":  # in the box: `python3 -I` leaves this file's folder, where wire.py is, off sys.path
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import wire
else:  # imported on the host
    from pinpoint.environments import wire

#: running commands (pid -> Popen), so `stop` and the sweep know what is still wanted
RUNNING = {}
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


#: the capabilities left in the server's own bounding set (None: all it started with), see `command_spawner`
BOUNDING = None


def command_spawner(keep):
    """The preexec function a command needs, or None when it needs none.

    A child that runs Python before exec costs a full fork (~0.7 ms more than the vfork subprocess uses without
    one), so the first command empties the server's own bounding set but `keep`: the server keeps the capabilities
    it holds (effective, permitted), and everything it execs as uid 0 gets `keep` at most, exactly what
    `drop_capabilities` gave each child. Only a command user (a uid switch), or another `keep`, needs the child."""
    global BOUNDING
    if BOUNDING is None:
        drop_capabilities(keep)
        BOUNDING = frozenset(keep)
    if OWNER or frozenset(keep) != BOUNDING:
        return lambda: become_command(keep)
    return None


def server_git(args, cwd):
    """The server's own git (a reset after the agent committed): as the command user when there is one, since a
    uid-0 git keeps no DAC_OVERRIDE once the bounding set is the commands' (the tree is handed over first)."""
    env = None
    if OWNER:
        chown_tree(cwd, OWNER[0], OWNER[1])
        env = dict(os.environ, HOME=OWNER[2])
    subprocess.check_call(["git", "-c", "safe.directory=*"] + args, cwd=cwd, stdin=subprocess.DEVNULL, env=env,
                          preexec_fn=(lambda: become_command(())) if OWNER else None)


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
    uid, gid, home = int(req.uid), int(req.gid), req.home
    if not os.path.isdir(home):
        os.makedirs(home)
    os.chown(home, uid, gid)
    changed = chown_tree(req.root, uid, gid)
    OWNER = (uid, gid, home)
    return wire.Status.done(changed=changed)


def kill_group(pgid):
    with contextlib.suppress(OSError):
        os.killpg(pgid, signal.SIGKILL)


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
    for pid in list(RUNNING):
        kill_group(pid)
    RUNNING.clear()
    return wire.Status.done(swept=sweep())


def read(conn, req):
    with open(req.path, "rb") as f:
        conn.send(wire.OUTPUT, f.read())
    return wire.Status.done()


def write(req, payload):
    parent = os.path.dirname(req.path)
    if parent and not os.path.isdir(parent):
        os.makedirs(parent)
    with open(req.path, "wb") as f:  # truncating in place keeps the file's mode and owner
        f.write(payload)
    return wire.Status.done()


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
        #: bytecode a reset may keep: relative path -> stat, recorded by `trust_bytecode` before any patch ran
        self.trusted = {}

    def trust_bytecode(self):
        """Record every `__pycache__` .pyc there is now whose source is a base file with its base stat: the host
        calls this before any untrusted code ran in the box (pooled.prime). Later resets keep a .pyc only while
        its stat is the one recorded here, so bytecode a patch's tests wrote (a forged .pyc with the source's
        mtime and size in its header) never reaches the next grading. Returns how many were recorded."""
        self.trusted = {rel: self.sig(st) for rel, _, kind, st in self.walk()
                        if rel not in self.files and is_bytecode(rel, kind, self.dirs)
                        and self.has_base_stat(bytecode_source(rel))}
        return wire.Status.done(trusted=len(self.trusted))

    def has_base_stat(self, rel):
        """Whether `rel` is a base file whose stat is its base stat now."""
        try:
            return self.files.get(rel) == self.sig(os.lstat(os.path.join(self.root, rel)))
        except OSError:
            return False

    def drop_stale_bytecode(self, bytecode, unchanged):
        """Of the new `__pycache__` entries met, keep the trusted .pyc files (`trust_bytecode`, same stat) whose
        source is in `unchanged` (a base file with its base stat: Python checks a .pyc against its source's mtime
        and size, both the base's again, and this bytecode was compiled from exactly that content); remove the
        rest. Returns how many were removed."""
        removed = 0
        for rel, path, kind, st in sorted(bytecode, key=lambda item: item[0].count("/"), reverse=True):
            if kind == "f" and bytecode_source(rel) in unchanged and self.trusted.get(rel) == self.sig(st):
                continue
            if kind == "d":
                with contextlib.suppress(OSError):
                    os.rmdir(path)  # only once empty
                continue
            remove(path, kind)
            removed += 1
        return removed

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

    def reset(self, keep_bytecode=False):
        """One walk of the tree: what differs from the manifest is put back, what is new is deleted; then what the
        walk did not meet (deleted entries) is recreated. `keep_bytecode`: a trusted `__pycache__/<name>.*.pyc`
        whose source `<name>.py` is a base file the walk found unchanged stays (see `drop_stale_bytecode`)."""
        changed, removed, seen, bytecode, touched = 0, set(), set(), [], set()
        for rel, path, kind, st in list(self.walk()):
            if removed and self.under(rel, removed):
                continue
            expected = "d" if rel in self.dirs else "l" if rel in self.links else "f" if rel in self.files else None
            if keep_bytecode and expected is None and is_bytecode(rel, kind, self.dirs):
                bytecode.append((rel, path, kind, st))
                continue
            if expected != kind or (kind == "l" and os.readlink(path) != self.links[rel]):
                remove(path, kind)
                if kind == "d":
                    removed.add(rel)
                changed += 1
                continue
            seen.add(rel)
            if kind == "f" and self.sig(st) != self.files[rel]:
                self.restore_file(rel)
                touched.add(rel)
                changed += 1
            elif kind == "d" and st.st_mode != self.dirs[rel]:  # chmod games on folders (000, a-w) are undone too
                os.chmod(path, self.dirs[rel] & 0o7777)
                changed += 1
        if os.lstat(self.root).st_mode != self.dirs[""]:
            os.chmod(self.root, self.dirs[""] & 0o7777)
            changed += 1
        for rel in sorted(self.dirs):
            if rel and rel not in seen:
                path = os.path.join(self.root, rel)
                os.makedirs(path, exist_ok=True)
                os.chmod(path, self.dirs[rel] & 0o7777)
                changed += 1
        for rel, target in self.links.items():
            if rel not in seen:
                os.symlink(target, os.path.join(self.root, rel))
                changed += 1
        restored = set()
        for rel in self.files:
            if rel not in seen:
                self.restore_file(rel)
                restored.add(rel)
                changed += 1
        changed += self.drop_stale_bytecode(bytecode, seen - restored - touched)
        changed += self.restore_git_modes()
        git_reset = self.git_signature() != self.git_sig
        if git_reset:
            server_git(["reset", "-q", "--hard", self.base], self.root)
            self.git_sig = self.git_signature()
        if OWNER and (changed or git_reset):  # what the server (uid 0) recreated belongs to the command user
            chown_tree(self.root, OWNER[0], OWNER[1])
            self.refresh_signatures()
        return wire.Status.done(changed=changed, git_reset=git_reset)

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
        for table in (self.files, self.trusted):
            for rel in list(table):
                with contextlib.suppress(OSError):
                    table[rel] = self.sig(os.lstat(os.path.join(self.root, rel)))
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


def is_bytecode(rel, kind, base_dirs):
    """A `__pycache__` folder in a base folder, or a plain `.pyc` file in one."""
    parent, name = os.path.split(rel)
    if kind == "d":
        return name == "__pycache__" and parent in base_dirs
    return kind == "f" and name.endswith(".pyc") and os.path.basename(parent) == "__pycache__" \
        and os.path.dirname(parent) in base_dirs


def bytecode_source(rel):
    """`pkg/__pycache__/mod.cpython-311.pyc` (or pytest's `mod.cpython-311-pytest-7.2.pyc`) -> `pkg/mod.py`."""
    cache = os.path.dirname(rel)
    return os.path.join(os.path.dirname(cache), os.path.basename(rel).split(".", 1)[0] + ".py")


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
        TREES[req.root] = Tree(req.root, req.store, req.base, req.limit_bytes)
    except (ValueError, OSError) as exc:
        TREES.pop(req.root, None)
        return wire.Status.failed(str(exc))
    return wire.Status.done(files=len(TREES[req.root].files))


def digest(req):
    """sha256 over the files under `root` (not `.git`, not `__pycache__`) whose name matches one of `patterns`
    (fnmatch on the base name; None: every file): each one's relative path, kind, executable bit and content, in path order. The grader
    compares it with the digest of the tree its box last installed, to know an install would do the same again.
    With `stats`, every entry's lstat instead of contents (a cheap "did anything write here" between two calls)."""
    root, patterns, stats = req.root, req.patterns, bool(req.stats)
    picked = []
    for parent, dirs, files in os.walk(root):
        if parent == root and ".git" in dirs:
            dirs.remove(".git")
        if "__pycache__" in dirs and not stats:  # bytecode: derived from the sources, which Python checks it against
            dirs.remove("__pycache__")
        names = files + dirs if stats else files + [d for d in dirs if os.path.islink(os.path.join(parent, d))]
        for name in names:
            if patterns is None or any(fnmatch.fnmatchcase(name, p) for p in patterns):
                picked.append(os.path.relpath(os.path.join(parent, name), root))
    total = hashlib.sha256()
    for rel in sorted(picked):
        path = os.path.join(root, rel)
        st = os.lstat(path)
        total.update(rel.encode("utf-8", "surrogateescape") + b"\0")
        if stats:
            total.update(repr((st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)).encode())
        elif stat_is_link(st.st_mode):
            total.update(b"l" + os.readlink(path).encode("utf-8", "surrogateescape"))
        else:
            total.update(b"x" if st.st_mode & 0o111 else b"f")
            with open(path, "rb") as f:
                total.update(hashlib.sha256(f.read()).digest())
    return wire.Status.done(sha256=total.hexdigest(), files=len(picked))


def trust_bytecode(req):
    tree = TREES.get(req.root)
    if tree is None:
        return wire.Status.failed("no snapshot of " + req.root)
    return tree.trust_bytecode()


def reset(req):
    tree = TREES.get(req.root)
    if tree is None:
        return wire.Status.failed("no snapshot of " + req.root)
    try:
        return tree.reset(bool(req.keep_bytecode))
    except (OSError, subprocess.CalledProcessError) as exc:
        return wire.Status.failed(str(exc))


#: seconds a finished command's output may keep arriving from processes that escaped its group and were not swept
#: (other commands still run)
DRAIN_S = 10.0
#: seconds one reply frame may wait for a client that does not read
SEND_TIMEOUT_S = 60.0


#: characters of a command bash would run as one plain argv: no quoting, expansion, redirection, list or comment
PLAIN_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./,:=+@% ")
#: words bash itself answers as a first word (builtins and reserved words): never exec'd directly
BASH_WORDS = frozenset((
    ".", ":", "[", "alias", "bg", "bind", "break", "builtin", "caller", "cd", "command", "compgen", "complete",
    "compopt", "continue", "declare", "dirs", "disown", "echo", "enable", "eval", "exec", "exit", "export", "false",
    "fc", "fg", "getopts", "hash", "help", "history", "jobs", "kill", "let", "local", "logout", "mapfile", "popd",
    "printf", "pushd", "pwd", "read", "readarray", "readonly", "return", "set", "shift", "shopt", "source",
    "suspend", "test", "times", "trap", "true", "type", "typeset", "ulimit", "umask", "unalias", "unset", "wait",
    "case", "coproc", "do", "done", "elif", "else", "esac", "fi", "for", "function", "if", "in", "select", "then",
    "time", "until", "while",
))
#: builtins whose coreutils program does exactly the same when given no argument
SAME_AS_PROGRAM = frozenset(("true", "false"))
#: variables that make bash run code of its own before the command (or change how it parses it)
BASH_HOOKS = ("BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS")


def plain_argv(cmd, env):
    """`cmd` as the argv `bash -c cmd` would exec, or None when bash has anything to do with it.

    Why: bash's own start is ~1.5 ms of a command's round trip in a box, and for a plain `ls -la src` or
    `python -m pytest tests/x.py` it only splits on spaces and execs (bash -c execs a lone simple command in place).
    So those run without it; anything with shell syntax, a builtin, a variable assignment, an exported function or
    a startup hook goes through bash as before."""
    if not cmd or not set(cmd) <= PLAIN_CHARS or any(k in env for k in BASH_HOOKS):
        return None
    argv = cmd.split()
    if not argv or "=" in argv[0] or any(k.startswith("BASH_FUNC_") for k in env):
        return None
    if argv[0] in BASH_WORDS and not (argv[0] in SAME_AS_PROGRAM and len(argv) == 1):
        return None
    return argv


def plain_env(env, argv, cwd):
    """The environment bash gives a command it execs: PWD the directory, SHLVL as inherited (bash -c adds one and
    takes it back for the exec), `_` the program's path."""
    env = dict(env)
    where = cwd or os.getcwd()
    inherited = env.get("PWD")
    if not (inherited and os.path.isabs(inherited) and same_dir(inherited, where)):
        env["PWD"] = os.path.realpath(where)
    env["SHLVL"] = env.get("SHLVL") or "0"
    env["_"] = shutil.which(argv[0], path=env.get("PATH", os.defpath)) or argv[0]
    return env


def same_dir(a, b):
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def spawn(cmd, cwd, env, keep):
    """The command's process: its plain argv exec'd directly where bash would only do that, else `bash -c`; a
    program that cannot be exec'd (not found, no shebang, a directory) goes to bash, which says why as it would."""
    options = dict(cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                   start_new_session=True, preexec_fn=command_spawner(keep))
    argv = plain_argv(cmd, env)
    if argv is not None:
        try:
            return subprocess.Popen(argv, env=plain_env(env, argv, cwd), **options)
        except OSError:
            pass
    return subprocess.Popen(["bash", "-c", cmd], env=env, **options)


class Run:
    """One command: its process group, output pipe and deadline, driven by the loop (no thread of its own)."""

    def __init__(self, loop, conn, req):
        self.loop, self.conn = loop, conn
        env = dict(os.environ)
        env.update(req.env or {})
        keep = set(req.keep_caps or ())
        if OWNER:
            env["HOME"] = OWNER[2]
        self.oom, self.pids = counter(OOM_COUNTERS), counter(PIDS_COUNTERS)
        self.proc = spawn(req.cmd, req.cwd or None, env, keep)
        RUNNING[self.proc.pid] = self.proc
        self.fd = self.proc.stdout.fileno()
        os.set_blocking(self.fd, False)
        loop.sel.register(self.fd, selectors.EVENT_READ, self.on_output)
        self.deadline = None if req.timeout is None else time.monotonic() + req.timeout
        self.timed_out, self.exited, self.eof, self.swept = False, False, False, 0

    def on_output(self):
        """Forward what the pipe holds now; False when it holds nothing more (or reached its end)."""
        try:
            chunk = os.read(self.fd, 65536)
        except BlockingIOError:
            return False
        if not chunk:
            self.eof = True
            return False
        if self.conn is not None and not self.conn.send(wire.OUTPUT, chunk):
            self.client_gone()
        return True

    def client_gone(self):
        """Nobody waits for this command any more: kill its group now."""
        self.conn = None
        kill_group(self.proc.pid)

    def tick(self, now):
        """Reap, time out, finish once the process is gone and its output ended; True when finished."""
        if not self.exited:
            if self.proc.poll() is None:
                if self.deadline is not None and now >= self.deadline:
                    self.timed_out, self.deadline = True, None  # SIGCHLD wakes the loop once the kill lands
                    kill_group(self.proc.pid)
                return False
            self.exited = True
            kill_group(self.proc.pid)  # whatever the command left running in its group
            RUNNING.pop(self.proc.pid, None)
            self.swept = sweep() if not RUNNING else 0
            self.deadline = now + DRAIN_S
        while self.on_output():
            pass
        if not self.eof and now < self.deadline:
            return False
        self.loop.sel.unregister(self.fd)
        self.proc.stdout.close()
        status = wire.RunStatus(None if self.timed_out else self.proc.returncode, self.timed_out,
                                grew(self.oom, counter(OOM_COUNTERS)), grew(self.pids, counter(PIDS_COUNTERS)),
                                self.swept)
        conn, self.conn = self.conn, None
        if conn is not None:
            conn.finished(wire.RUN_DONE, status.pack())
        return True


OPS = {
    "read": lambda conn, req, payload: read(conn, req),
    "write": lambda conn, req, payload: write(req, payload),
    "snapshot": lambda conn, req, payload: snapshot(req),
    "reset": lambda conn, req, payload: reset(req),
    "trust_bytecode": lambda conn, req, payload: trust_bytecode(req),
    "digest": lambda conn, req, payload: digest(req),
    "stop": lambda conn, req, payload: stop(req),
    "own": lambda conn, req, payload: own(req),
}


class Conn:
    """One client connection: requests one after another (a client keeps it open between them)."""

    def __init__(self, loop, sock):
        self.loop, self.sock = loop, sock
        sock.settimeout(SEND_TIMEOUT_S)
        self.buf, self.run, self.closed = bytearray(), None, False
        loop.sel.register(sock, selectors.EVENT_READ, self.on_readable)

    def on_readable(self):
        try:
            data = self.sock.recv(1 << 20)
        except OSError:
            data = b""
        if not data:  # the client went away (a running command is killed)
            self.close()
            return
        self.buf += data
        try:
            self.serve()
        except (ValueError, KeyError, TypeError):  # not a request of ours
            self.close()

    def serve(self):
        """Answer the complete requests in the buffer, one at a time (a run answers when it ends)."""
        while self.run is None and not self.closed:
            decoded = wire.decode_request(self.buf)
            if decoded is None:
                return
            req, payload, end = decoded
            del self.buf[:end]
            self.dispatch(req, payload)

    def dispatch(self, req, payload):
        try:
            if isinstance(req, wire.Run):
                self.run = Run(self.loop, self, req)
                self.loop.runs.append(self.run)
                return
            status = OPS[req.op](self, req, payload)
        except OSError as exc:
            status = wire.Status.failed(str(exc), type(exc).__name__, exc.errno)
        self.finished(wire.STATUS, wire.encode_status(status))

    def finished(self, kind, status):
        """The last frame of a request; then the next request, if one is waiting."""
        self.run = None
        if self.send(kind, status):
            self.serve()

    def send(self, kind, data):
        if self.closed:
            return False
        try:
            if len(data) > 65536:
                self.sock.sendall(wire.FRAME.pack(kind, len(data)))
                self.sock.sendall(data)
            else:
                self.sock.sendall(wire.encode_frame(kind, data))
            return True
        except OSError:  # socket.timeout included: a client that stopped reading is treated as gone
            self.close()
            return False

    def close(self):
        if self.closed:
            return
        self.closed = True
        with contextlib.suppress(KeyError, ValueError):
            self.loop.sel.unregister(self.sock)
        self.sock.close()
        if self.run is not None:
            self.run.client_gone()


class Loop:
    """The whole server in one thread: the listening socket, every connection, every command's output pipe and
    SIGCHLD (through the signal wakeup fd), with the nearest command deadline as the select timeout."""

    def __init__(self, server):
        self.server, self.sel, self.runs = server, selectors.DefaultSelector(), []
        self.wake, wake_w = os.pipe()
        os.set_blocking(self.wake, False)
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda signum, frame: None)  # the wakeup byte is what matters
        self.sel.register(server, selectors.EVENT_READ, self.accept)
        self.sel.register(self.wake, selectors.EVENT_READ, self.drain_wakeups)

    def accept(self):
        try:
            sock, _ = self.server.accept()
        except OSError:
            return
        Conn(self, sock)

    def drain_wakeups(self):
        with contextlib.suppress(OSError):
            while os.read(self.wake, 4096):
                pass

    def forever(self):
        while True:
            now = time.monotonic()
            for done in [run for run in list(self.runs) if run.tick(now)]:
                self.runs.remove(done)
            deadlines = [run.deadline for run in self.runs if run.deadline is not None]
            timeout = max(0.0, min(deadlines) - time.monotonic()) if deadlines else None
            for key, _ in self.sel.select(timeout):
                key.data()


def main(path):
    tmp = path + ".tmp"
    for stale in (path, tmp):
        if os.path.exists(stale):
            os.unlink(stale)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(tmp)
    os.chmod(tmp, 0o777)
    server.listen(128)
    loop = Loop(server)
    os.rename(tmp, path)  # the socket appears only once it accepts: its presence means "ready"
    loop.forever()


if __name__ == "__main__":
    main(sys.argv[1])
