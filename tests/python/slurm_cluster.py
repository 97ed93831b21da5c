"""The cluster path for real: a single-node Slurm (munge, slurmctld, slurmd) on localhost runs a
small sweep as an array job through experiments/slurm/submit.sh; one array task is SIGKILLed
mid-run and requeued (`scontrol requeue`), resumes its shard, and the merge job's file must
verify and hold exactly a single run's points and values.

    build/venv/bin/python3 tests/python/slurm_cluster.py      # as root (the daemons run as root)

Needs the Debian packages munge, slurmctld, slurmd and slurm-client (.ci/run installs them).
Exit 0 when it held, 1 when it did not, 77 (CTest: skipped) when no Slurm can run here: the
packages are missing, not root, or the daemons did not start (the reason and the daemons' logs
are printed). Everything lives in a temporary folder (keys, state, config, ports chosen free);
the daemons it started are stopped by their process ids at the end. KVLAB_BIN names kvlab.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import h5py

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KVLAB = os.environ.get("KVLAB_BIN") or os.path.join(ROOT, "build", "experiments", "kvlab")
SKIP = 77
CONFIG = """\
name = slurm_flow
seed = 11
[f]
kind = format_error
format = e4m3,e5m2,e2m1
dist = gaussian,laplace
tokens = range:16:1600:16
head_dim = 64
"""


def log(msg):
    print(f"[slurm] {msg}", flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rows(path):
    """key -> rel_l2_mean of a result file, or {} while it cannot be read (being written)."""
    try:
        with h5py.File(path, "r") as f:
            return dict(zip(f["index/key"].asstr()[()], f["index/rel_l2_mean"][()]))
    except (OSError, KeyError):
        return {}


def kvlab_pid_of(shard):
    """The kvlab process writing `shard`, or None."""
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if argv and os.path.basename(argv[0]) == b"kvlab" and shard.encode() in argv:
            return int(p)
    return None


class Cluster:
    def __init__(self, d):
        self.d = d
        self.pids = []
        self.env = dict(os.environ, SLURM_CONF=os.path.join(d, "slurm.conf"))

    def start(self):
        """Starts munged, slurmctld and slurmd; returns "" or why they did not start."""
        d = self.d
        for sub in ("munge", "state", "spool", "log"):
            os.makedirs(os.path.join(d, sub))
        key = os.path.join(d, "munge", "munge.key")
        with open(key, "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(key, 0o600)
        sock = os.path.join(d, "munge", "socket")
        r = subprocess.run(["munged", "--force", f"--key-file={key}", f"--socket={sock}",
                            f"--pid-file={d}/munge/munged.pid", f"--log-file={d}/log/munged.log",
                            f"--seed-file={d}/munge/seed"], capture_output=True, text=True)
        if r.returncode != 0:
            return f"munged did not start: {r.stderr.strip()}"
        self._track(f"{d}/munge/munged.pid")
        host = socket.gethostname()
        ncpu = os.cpu_count() or 2
        with open(os.path.join(d, "slurm.conf"), "w") as f:
            f.write(f"""ClusterName=kvlabtest
SlurmctldHost={host}
AuthType=auth/munge
AuthInfo=socket={sock}
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.pid
SlurmctldLogFile={d}/log/slurmctld.log
SlurmdLogFile={d}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
ReturnToService=2
JobRequeue=1
KillWait=5
MinJobAge=300
NodeName={host} CPUs={ncpu} State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP
""")
        conf = os.path.join(d, "slurm.conf")
        for cmd, pidf in ((["slurmctld", "-c", "-f", conf], "slurmctld.pid"), (["slurmd", "-f", conf], "slurmd.pid")):
            r = subprocess.run(cmd, capture_output=True, text=True, env=self.env)
            if r.returncode != 0:
                return f"{cmd[0]} did not start (exit {r.returncode}): {r.stderr.strip()}"
            time.sleep(0.5)
            self._track(os.path.join(d, pidf))
        deadline = time.time() + 30
        while time.time() < deadline:
            r = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, env=self.env)
            if r.returncode == 0 and r.stdout.strip() == "idle":
                return ""
            time.sleep(0.5)
        return f"the node did not become idle in 30 s (sinfo: {r.stdout.strip() or r.stderr.strip()})"

    def _track(self, pidfile):
        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                with open(pidfile) as f:
                    self.pids.append(int(f.read().split()[0]))
                return
            except (OSError, ValueError, IndexError):
                time.sleep(0.1)

    def logs(self):
        out = []
        for n in ("munged", "slurmctld", "slurmd"):
            p = os.path.join(self.d, "log", f"{n}.log")
            if os.path.exists(p):
                out.append(f"--- {n}.log (tail)\n" + "".join(open(p, errors="replace").readlines()[-15:]))
        return "\n".join(out)

    def stop(self):
        for pid in reversed(self.pids):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.time() + 10
        for pid in self.pids:
            while time.time() < deadline:
                try:
                    os.kill(pid, 0)
                    time.sleep(0.1)
                except ProcessLookupError:
                    break

    def run(self, *cmd, **kw):
        return subprocess.run(list(cmd), capture_output=True, text=True, env=self.env, **kw)


def main():
    missing = [t for t in ("munged", "slurmctld", "slurmd", "sbatch", "scontrol", "squeue", "sinfo")
               if shutil.which(t) is None]
    if missing:
        print(f"SKIP: no Slurm here ({', '.join(missing)} not installed: apt-get install munge slurmctld slurmd "
              f"slurm-client)")
        return SKIP
    if os.geteuid() != 0:
        print("SKIP: the single-node Slurm of this test runs its daemons as root; run it as root")
        return SKIP
    work = tempfile.mkdtemp(prefix="kvlab_slurm_")
    os.chmod(work, 0o755)
    cl = Cluster(work)
    try:
        why = cl.start()
        if why:
            print(f"SKIP: the Slurm daemons cannot run here: {why}\n{cl.logs()}")
            return SKIP
        log(f"single-node Slurm up in {work}")
        cfg = os.path.join(work, "flow.ini")
        with open(cfg, "w") as f:
            f.write(CONFIG)
        ref = os.path.join(work, "single.h5")
        r = subprocess.run([KVLAB, "sweep", cfg, "--out", ref, "--progress", "none", "--no-fsync"],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        reference = rows(ref)
        out = os.path.join(work, "out")
        env = dict(cl.env, KVLAB=KVLAB)
        r = subprocess.run(["bash", os.path.join(ROOT, "experiments", "slurm", "submit.sh"), "2", cfg, out],
                           capture_output=True, text=True, env=env, cwd=work)
        if r.returncode != 0:
            print(f"FAIL: submit.sh exit {r.returncode}: {r.stderr}")
            return 1
        log(r.stdout.strip())
        array = r.stdout.split()[2]
        merge_job = r.stdout.split()[7].rstrip(",")
        # Kill task 1 with SIGKILL after a quarter of its points, then requeue it. The merge job
        # (afterany: it waits for every task to end) is held meanwhile: between the kill and the
        # requeue task 1 counts as ended, and a sibling that finishes then would let the merge
        # start on a partial shard.
        r = cl.run("scontrol", "hold", merge_job)
        if r.returncode != 0:
            print(f"FAIL: scontrol hold {merge_job}: {r.stderr.strip()}")
            return 1
        shard = os.path.join(out, "shard-1-of-2.h5")
        want = len(reference) // 8
        deadline = time.time() + 300
        before = 0
        while time.time() < deadline and before < want:
            before = max(before, len(rows(shard)))
            time.sleep(0.05)
        pid = kvlab_pid_of(shard)
        if pid is None:
            print(f"FAIL: task 1 ({shard}) is not running after {before} points\n{cl.logs()}")
            return 1
        os.kill(pid, signal.SIGKILL)
        log(f"SIGKILLed task 1 (pid {pid}) with {before} of its points committed")
        # Requeue only once the controller has seen the task end, and two seconds after it: slurmd
        # revokes a killed job's credential with a one-second timestamp, and a relaunch within
        # the same second is refused ("Job credential revoked", the task then fails with no
        # resume: seen once in CI when the requeue came 0.5 s after the kill).
        gone = time.time() + 60
        while time.time() < gone:
            q = cl.run("squeue", "-h", "-j", f"{array}_1", "-o", "%T")
            if q.returncode == 0 and q.stdout.strip() not in ("RUNNING", "COMPLETING"):
                break
            time.sleep(0.2)
        time.sleep(2.0)
        r = cl.run("scontrol", "requeue", f"{array}_1")
        if r.returncode != 0:
            print(f"FAIL: scontrol requeue {array}_1: {r.stderr.strip()}")
            return 1
        # A requeued job waits (BeginTime) before it may start again; a real cluster gives the
        # node time to recover, this test only needs the restart.
        cl.run("scontrol", "update", f"jobid={array}_1", "StartTime=now")
        log(f"requeued {array}_1")
        r = cl.run("scontrol", "release", merge_job)
        if r.returncode != 0:
            print(f"FAIL: scontrol release {merge_job}: {r.stderr.strip()}")
            return 1
        deadline = time.time() + 600
        while time.time() < deadline:
            q = cl.run("squeue", "-h", "-o", "%i %T %r")
            if q.returncode == 0 and not q.stdout.strip():
                break
            time.sleep(1)
        else:
            print(f"FAIL: the jobs did not finish in 600 s:\n{q.stdout}\n{cl.logs()}")
            return 1
        state = cl.run("scontrol", "show", "job", merge_job).stdout
        merged = os.path.join(out, "merged.h5")
        task1_log = "".join(open(os.path.join(out, n)).read() for n in sorted(os.listdir(out))
                            if n.startswith(f"kvlab-{array}_1"))
        failures = []
        if "JobState=COMPLETED" not in state:
            failures.append(f"merge job {merge_job} did not complete: {state.split('Reason')[0][-300:]}")
        if "--resume" not in task1_log and "resum" not in task1_log.lower():
            failures.append("task 1's log shows no resume")
        if task1_log.count("[slurm] job") < 2:
            failures.append(f"task 1 ran {task1_log.count('[slurm] job')} times (want 2: killed, requeued)")
        if not os.path.exists(merged):
            failures.append(f"no {merged}")
        else:
            c = subprocess.run([KVLAB, "check", merged], capture_output=True, text=True)
            if c.returncode != 0:
                failures.append(f"kvlab check {merged}: {c.stdout.strip()}")
            got = rows(merged)
            if set(got) != set(reference):
                failures.append(f"merged file: {len(got)} points, single run {len(reference)}; "
                                f"{len(set(reference) - set(got))} missing, {len(set(got) - set(reference))} extra")
            elif any(got[k] != reference[k] for k in reference):
                failures.append("merged values differ from the single run's")
        print(f"\nslurm array: 2 tasks, task 1 SIGKILLed after {before} points and requeued; merged "
              f"{len(rows(merged)) if os.path.exists(merged) else 0} points, single run {len(reference)}")
        if failures:
            print("FAIL:\n  " + "\n  ".join(failures) + "\n" + task1_log[-2000:] + "\n" + cl.logs())
            return 1
        print("slurm array with a killed and requeued task: the merged file equals a single run (kvlab check: intact)")
        return 0
    finally:
        cl.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
