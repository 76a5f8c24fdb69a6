"""CPU seconds per program from a `pidstat -u -h 1` log, for the benchmark scripts
(bench-pg.sh, pg-floor.sh, pg-floor-get.sh import it from their embedded Python)."""


def cpu_seconds(pidstat_path, pids=None, only=None):
    """Seconds of CPU per program name over the log (every PostgreSQL process counted as
    `postgres`), and how many distinct one-second samples counted. `pids`: the process ids to
    count (None: all); `only`: the programs that filter applies to (None: all of them)."""
    secs, samples = {}, set()
    for line in open(pidstat_path):
        f = line.split()
        if len(f) < 10 or f[0].startswith("#"):
            continue
        try:
            pct = float(f[7])
        except ValueError:
            continue
        prog = "postgres" if f[9].startswith("postgres") else f[9]
        if pids is not None and (only is None or prog in only) and f[2] not in pids:
            continue
        samples.add(f[0])
        secs[prog] = secs.get(prog, 0.0) + pct / 100.0
    return secs, len(samples)
