"""The ``theano-queue`` command (also ``python -m theano_queue``).

Commands: ``info``, ``probe``, ``demo``, ``bench``, ``trace``; ``theano-queue COMMAND
--help`` says more.  Each exits 0 when it did its job, 1 with a message on
stderr when it cannot run here (no CUDA driver, no GPU, not a checkout), and
2 on a usage error.
"""

import argparse
import configparser
import json
import os
import platform
import subprocess
import sys

from .. import __version__
from ..core.arguments import int_at_least

COMMANDS = {
    "info": "the stack's versions, the Theano flags in effect, the GPUs and whether pinned memory and copies work",
    "probe": "measure host-to-device (pinned and pageable) and host copy bandwidth, and the limit per source kind",
    "demo": "train a classifier on scikit-learn's digits, fed through a queue (the README's loop)",
    "bench": "run the benchmark suite, bench/run.py (in a checkout of theano_queue)",
    "trace": "show what the auto knobs (workers, capacity, threads) decided over time, from a saved JSON file",
}

MiB = 1 << 20
# The engine's limit on host copy threads (_engine.set_copy_threads).
MAX_COPY_THREADS = 256
GiB = 1 << 30


class CannotRun(Exception):
    """The command cannot do its job on this machine; the message says why."""


def _usage():
    lines = [
        "usage: theano-queue [-h] [--version] COMMAND [ARGS...]",
        "",
        "Tools for theano_queue %s: what this machine can do for an input pipeline." % __version__,
        "",
        "commands:",
    ]
    lines += ["  %-7s %s" % (name, text) for name, text in COMMANDS.items()]
    lines += ["", "theano-queue COMMAND --help describes a command's arguments."]
    return "\n".join(lines)


def theano_environment():
    """Makes THEANO_FLAGS name a BLAS before Theano is imported; returns a note when it had to.

    Theano 1.0.5's BLAS probe crashes on numpy 1.23 when ``blas.ldflags`` is
    not set (empty is enough).  The venv of scripts/install-deps.sh sets it in
    a config file; a user may too: only where nothing does is it set here."""
    if blas_ldflags_configured():
        return None
    flags = os.environ.get("THEANO_FLAGS", "")
    os.environ["THEANO_FLAGS"] = ",".join(f for f in (flags, "blas.ldflags=") if f)
    return "no Theano setting names blas.ldflags: set to empty for this command (Theano's BLAS probe fails without it)"


def blas_ldflags_configured():
    """True when THEANO_FLAGS or one of Theano's config files (THEANORC) sets blas.ldflags."""
    flags = os.environ.get("THEANO_FLAGS", "")
    if "blas.ldflags" in flags or "blas__ldflags" in flags:
        return True
    for path in os.environ.get("THEANORC", "~/.theanorc").split(os.pathsep):
        parser = configparser.ConfigParser(interpolation=None)
        try:
            parser.read(os.path.expanduser(path))
        except configparser.Error:
            continue
        if parser.has_option("blas", "ldflags"):
            return True
    return False


# ---- info -------------------------------------------------------------------------------


def _version_of(module_name):
    try:
        module = __import__(module_name)
    except Exception as exc:  # a broken install is information too
        return "not importable (%s: %s)" % (type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")
    return getattr(module, "__version__", "installed")


def _gib(nbytes):
    return "%.1f GiB" % (nbytes / GiB)


def cmd_info(argv):
    parser = argparse.ArgumentParser(prog="theano-queue info", description=COMMANDS["info"])
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    parser.add_argument("--no-check", action="store_true", help="skip the pinned-memory and copy check")
    args = parser.parse_args(argv)
    note = theano_environment()
    from .. import _engine
    from . import probe

    report = {
        "theano_queue": __version__,
        "engine": {"path": _engine.__file__, "copy_threads": _engine.copy_threads()},
        "python": platform.python_version(),
        "versions": {name: _version_of(name) for name in ("numpy", "theano", "pygpu", "tqdm")},
        "THEANO_FLAGS": os.environ.get("THEANO_FLAGS", ""),
        "note": note,
    }
    try:
        import theano

        from ..core.target import theano_gpu_contexts

        config = theano.config
        report["theano"] = {
            "device": config.device,
            "floatX": config.floatX,
            "contexts": config.contexts,
            "gpuarray.single_stream": config.gpuarray.single_stream,
            "blas.ldflags": config.blas.ldflags,
            "compiledir": config.compiledir,
        }
        report["theano_gpu_contexts"] = [str(name) for name in theano_gpu_contexts()]
    except Exception as exc:
        report["theano"] = {"error": "%s: %s" % (type(exc).__name__, exc)}
    try:
        report["cuda_driver"] = probe.driver_version()
        report["gpus"] = probe.devices()
        if not args.no_check:
            for gpu in report["gpus"]:
                gpu["check"] = {
                    k: {"ok": ok, "detail": detail} for k, (ok, detail) in probe.self_check(gpu["ordinal"]).items()
                }
    except Exception as exc:  # no driver or no GPU: reported, not fatal, for info
        report["cuda_driver"] = None
        report["gpus"] = []
        report["gpu_error"] = str(exc)
    if args.json:
        print(json.dumps(report, indent=1, default=str))
        return 0
    print(
        "theano_queue %s  (engine %s, %d host copy threads)"
        % (__version__, report["engine"]["path"], report["engine"]["copy_threads"])
    )
    print("python %s, %s" % (report["python"], ", ".join("%s %s" % kv for kv in report["versions"].items())))
    print("THEANO_FLAGS=%s" % report["THEANO_FLAGS"])
    if note:
        print("  note: %s" % note)
    theano_cfg = report["theano"]
    if "error" in theano_cfg:
        print("Theano: %s" % theano_cfg["error"])
    else:
        print("Theano in effect: " + ", ".join("%s=%s" % kv for kv in theano_cfg.items()))
        contexts = report["theano_gpu_contexts"]
        print("Theano on a GPU: %s" % (("yes, contexts: " + ", ".join(contexts)) if contexts else "no"))
    if report["cuda_driver"] is None:
        print("CUDA driver: none; GPUs: none (%s)" % report["gpu_error"])
        return 0
    print("CUDA driver: supports CUDA %s; %d GPU(s)" % (report["cuda_driver"], len(report["gpus"])))
    failed = False
    for gpu in report["gpus"]:
        free = _gib(gpu["free_bytes"]) if gpu["free_bytes"] is not None else "? (%s)" % gpu.get("error")
        print(
            "GPU %d: %s, PCI %s, compute %s, %d copy engine(s), %s free of %s"
            % (
                gpu["ordinal"],
                gpu["name"],
                gpu["pci_bus_id"],
                gpu["compute_capability"],
                gpu["copy_engines"],
                free,
                _gib(gpu["total_bytes"]),
            )
        )
        for what, result in gpu.get("check", {}).items():
            print("  %s: %s (%s)" % (what.replace("_", " "), "ok" if result["ok"] else "FAILED", result["detail"]))
            failed |= not result["ok"]
    if failed:
        raise CannotRun("a GPU failed its pinned-memory or copy check (above)")
    return 0


# ---- probe ------------------------------------------------------------------------------


def _sizes(text):
    try:
        sizes = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError("expected comma-separated MiB, got %r" % text) from None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError("expected sizes >= 1 MiB, got %r" % text)
    return sizes


def cmd_probe(argv):
    parser = argparse.ArgumentParser(
        prog="theano-queue probe",
        description=COMMANDS["probe"],
        epilog="Without a CUDA driver or GPU it measures the host copy, then exits 1 saying why it stopped.",
    )
    parser.add_argument("--device", type=int_at_least(0), default=0, help="GPU ordinal (default 0)")
    parser.add_argument("--sizes", type=_sizes, default=[1, 16, 256], help="copy sizes in MiB (default 1,16,256)")
    parser.add_argument(
        "--repeats",
        type=int_at_least(1),
        default=None,
        help="copies per size (default: enough to move 2 GiB, at least 3)",
    )
    parser.add_argument(
        "--threads",
        type=int_at_least(1, MAX_COPY_THREADS),
        default=None,
        help="host copy threads (default: the engine's)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    args = parser.parse_args(argv)
    from .. import _engine
    from . import probe

    def repeats(mib):
        return args.repeats or max(3, 2048 // mib)

    largest = max(args.sizes)
    result = {
        "host_copy": {
            "MiB": largest,
            "threads": args.threads or _engine.copy_threads(),
            "engine_GBps": probe.host_copy_gbps(largest * MiB, args.threads, repeats(largest)),
            "numpy_GBps": probe.host_copy_gbps(largest * MiB, repeats=repeats(largest), via="numpy"),
        },
        "h2d": [],
    }
    if not args.json:
        hc = result["host_copy"]
        print(
            "host copy, %d MiB: %.1f GB/s through the engine's copy pool (%d threads); "
            "%.1f GB/s with numpy.copyto (1 thread)" % (largest, hc["engine_GBps"], hc["threads"], hc["numpy_GBps"]),
            flush=True,
        )
    failure = None
    try:
        for mib in args.sizes:
            row = {"MiB": mib}
            for kind, pinned in (("pinned", True), ("pageable", False)):
                seconds = probe.h2d_seconds(mib * MiB, repeats(mib), pinned=pinned, device=args.device)
                row[kind + "_GBps"] = mib * MiB / seconds / 1e9
            result["h2d"].append(row)
            if not args.json:
                print(
                    "host->device, %4d MiB: pinned %.1f GB/s, pageable %.1f GB/s"
                    % (mib, row["pinned_GBps"], row["pageable_GBps"]),
                    flush=True,
                )
    except Exception as exc:
        failure = "%s; host-to-device bandwidth cannot be measured here" % exc
    at_largest = result["h2d"][-1] if result["h2d"] else {}
    result["limits"] = [
        {"source": source, "GBps": gbps, "why": why}
        for source, gbps, why in probe.limits(
            at_largest.get("pinned_GBps"), at_largest.get("pageable_GBps"), result["host_copy"]["engine_GBps"]
        )
    ]
    if args.json:
        result["error"] = failure
        print(json.dumps(result, indent=1))
    else:
        print("limits at %d MiB, by source kind:" % largest)
        for limit in result["limits"]:
            value = "%.1f GB/s" % limit["GBps"] if limit["GBps"] is not None else "(needs a GPU)"
            print("  %-14s %s\n  %14s %s" % (value, limit["source"], "", limit["why"]))
    if failure:
        raise CannotRun(failure)
    return 0


# ---- demo -------------------------------------------------------------------------------


def cmd_demo(argv):
    theano_environment()
    from . import demo

    demo.main(argv, prog="theano-queue demo")
    return 0


# ---- bench ------------------------------------------------------------------------------


def checkout_root():
    """The checkout the package runs from (with bench/run.py), or None for an installed package."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # above theano_queue/tools/
    return root if os.path.isfile(os.path.join(root, "bench", "run.py")) else None


BENCH_HELP = """usage: theano-queue bench [--help] [RUN.PY ARGUMENTS...]

Runs bench/run.py of the checkout this package runs from, with these arguments
(its own help follows when it is there).  It rewrites doc/bench/results.json
and doc/benchmarks.rst: on a machine where Theano does not run on a GPU it
refuses unless given --out PATH, and then writes only PATH (--no-report).
"""


def cmd_bench(argv):
    root = checkout_root()
    if "-h" in argv or "--help" in argv:
        theano_environment()  # run.py imports Theano even for --help
        print(BENCH_HELP)
        if root is None:
            print("Not available here: %s" % _not_a_checkout())
            return 0
        sys.stdout.flush()
        return subprocess.call([sys.executable, os.path.join(root, "bench", "run.py"), "--help"], cwd=root)
    if root is None:
        raise CannotRun(_not_a_checkout())
    note = theano_environment()
    if note:
        print("note: " + note, file=sys.stderr)
    from ..core.target import theano_gpu_contexts

    argv = list(argv)
    if not theano_gpu_contexts():
        if not any(a == "--out" or a.startswith("--out=") for a in argv):
            raise CannotRun(
                "Theano is not on a GPU here (THEANO_FLAGS device=%s): the GPU scenarios would be skipped and "
                "doc/bench/results.json, the figures of record, replaced. Select a GPU "
                "(THEANO_FLAGS=device=cuda0), or write elsewhere: theano-queue bench --out /tmp/results.json "
                "--only 9 (make bench BENCH_ARGS='--out /tmp/results.json --only 9')" % _theano_device()
            )
        if "--no-report" not in argv:
            argv.append("--no-report")
            print("note: no GPU: results go to --out only (--no-report)", file=sys.stderr)
    return subprocess.call([sys.executable, os.path.join(root, "bench", "run.py")] + argv, cwd=root)


def _theano_device():
    import theano

    return theano.config.device


def _not_a_checkout():
    return (
        "the benchmarks are not installed with the package: bench/run.py lives in a checkout of "
        "theano_queue. Clone it, install it with pip install -e . and run theano-queue bench (or make bench) "
        "there"
    )


# ---- trace ------------------------------------------------------------------------------


def cmd_trace(argv):
    parser = argparse.ArgumentParser(
        prog="theano-queue trace",
        description="Prints the auto knobs over time: a table of every change with its reason, then a step plot "
        "per knob.  FILE is a Queue.trace() JSON file of a queue with a knob set to auto, feeder.stats() or "
        'feeder.stats()["auto"] saved with json.dump, or AutoLog.save()\'s file.',
    )
    parser.add_argument("file", metavar="FILE")
    parser.add_argument("--width", type=int_at_least(10), default=40, help="columns of each plot (default 40)")
    args = parser.parse_args(argv)
    from .trace import auto_of, auto_timeline, format_timeline

    try:
        with open(args.file) as f:
            document = json.load(f)
    except (OSError, ValueError) as exc:
        raise CannotRun("cannot read %s as JSON: %s" % (args.file, exc)) from None
    auto = auto_of(document)
    if auto is None:
        raise CannotRun(
            '%s holds no auto history: expected a Queue.trace() file of a queue with a knob set to "auto", or '
            'feeder.stats() / feeder.stats()["auto"] saved as JSON' % args.file
        )
    print(format_timeline(auto_timeline(auto), args.width))
    return 0


# ---- main -------------------------------------------------------------------------------

HANDLERS = {"info": cmd_info, "probe": cmd_probe, "demo": cmd_demo, "bench": cmd_bench, "trace": cmd_trace}


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0 if argv else 2
    if argv[0] == "--version":
        print("theano_queue %s" % __version__)
        return 0
    command, rest = argv[0], argv[1:]
    if command not in HANDLERS:
        print(_usage(), file=sys.stderr)
        print("\ntheano-queue: unknown command %r" % command, file=sys.stderr)
        return 2
    try:
        return HANDLERS[command](rest)
    except CannotRun as exc:
        print("theano-queue %s: %s" % (command, exc), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("theano-queue %s: interrupted" % command, file=sys.stderr)
        return 130
