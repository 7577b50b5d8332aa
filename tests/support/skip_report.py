"""Skips made visible: a pytest plugin (loaded by the suites' conftest.py) and the listing ``make test`` ends with.

* **Installed clients run.**  Where a client of :data:`clients.CLIENTS` is
  installed and its tests ran in this session, they must not all have
  skipped, and no skip may say it is not installed: the run fails, naming
  the client and the skip's reason (a broken install, Keras on TensorFlow).
* **Skips by reason.**  The run ends with its skips grouped by reason and
  counted.  With ``TQ_SKIPS_FILE`` set, they are also appended there (one JSON
  line each) for ``python tests/support/skip_report.py FILE``, which lists
  every suite's together: what ``make test`` prints last, so that a new skip
  is seen.
"""

import collections
import json
import os
import sys

from clients import CLIENTS, installed

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUTCOMES = ("passed", "failed", "error", "xfailed", "xpassed", "skipped")


def reason_of(report):
    """The reason a skipped report gives, without pytest's ``Skipped: `` prefix."""
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    return reason[len("Skipped: ") :] if reason.startswith("Skipped: ") else reason


def checkout_path(config, nodeid):
    """A node id from the checkout's root, whatever the run's rootdir (tests/pytensor has its own)."""
    path, _, rest = nodeid.partition("::")
    path = os.path.relpath(os.path.join(str(config.rootpath), path), ROOT).replace(os.sep, "/")
    return path + ("::" + rest if rest else "")


def outcomes(config, stats):
    """``[(node id from the root, outcome, report)]`` of every test and collection report the run made."""
    found = []
    for outcome in OUTCOMES:
        for report in stats.get(outcome, ()):
            if getattr(report, "nodeid", None) is not None and (outcome != "passed" or report.when == "call"):
                found.append((checkout_path(config, report.nodeid), outcome, report))
    return found


def silent_clients(config, stats, is_installed=installed):
    """``[(client, why)]`` for each installed client whose tests ran here but all skipped, or said "not installed"."""
    seen = outcomes(config, stats)
    silent = []
    for module, (name, tests) in CLIENTS.items():
        mine = [(outcome, report) for nodeid, outcome, report in seen if nodeid.startswith(tests)]
        if not mine or not is_installed(module):
            continue
        skipped = [reason_of(report) for outcome, report in mine if outcome == "skipped"]
        refused = [r for r in skipped if "not installed" in r and (module in r or name.split()[0] in r)]
        if refused or len(skipped) == len(mine):
            why = (refused or skipped)[0]
            silent.append((name, "%s is installed (%s) but its tests skipped: %s" % (name, module, why)))
    return silent


def grouped(config, stats):
    """``{reason: [node id, ...]}`` of the run's skips."""
    groups = collections.defaultdict(list)
    for nodeid, outcome, report in outcomes(config, stats):
        if outcome == "skipped":
            groups[reason_of(report)].append(nodeid)
    return groups


def suite_name():
    """The suite a run belongs to: its venv's folder (``.venv``, ``.venv-pytensor``, ``.venv-pymc``)."""
    return os.path.basename(sys.prefix)


def pytest_sessionfinish(session, exitstatus):
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None:
        return
    silent = silent_clients(session.config, reporter.stats)
    session.config._tq_silent_clients = silent
    if silent and session.exitstatus in (0, 5):  # passed, or nothing collected (the module skipped)
        session.exitstatus = 1  # tests failed
    path = os.environ.get("TQ_SKIPS_FILE")
    if path:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "a") as f:
            for reason, nodeids in sorted(grouped(session.config, reporter.stats).items()):
                f.write(json.dumps({"suite": suite_name(), "reason": reason, "tests": nodeids}) + "\n")


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    groups = grouped(config, terminalreporter.stats)
    if groups:
        terminalreporter.section("skipped, by reason")
        for line in listing([(suite_name(), reason, nodeids) for reason, nodeids in groups.items()], suites=False):
            terminalreporter.write_line(line)
    for name, why in getattr(config, "_tq_silent_clients", ()):
        terminalreporter.section("installed client not tested: %s" % name, red=True)
        terminalreporter.write_line(why, red=True)


def listing(entries, suites=True):
    """Lines of ``(suite, reason, node ids)`` entries, the most common reason first, each with a count and a
    first test."""
    counts = collections.defaultdict(list)
    for suite, reason, nodeids in entries:
        counts[(suite, reason)].extend(nodeids)
    lines = []
    for (suite, reason), nodeids in sorted(counts.items(), key=lambda item: (-len(item[1]), item[0])):
        where = "%s: " % suite if suites else ""
        lines.append("%5d  %s%s  (e.g. %s)" % (len(nodeids), where, reason, nodeids[0]))
    return lines


def main(argv=None):
    """Prints the skips recorded in the files given (``TQ_SKIPS_FILE`` of each suite's run), grouped by reason."""
    entries = []
    for path in sys.argv[1:] if argv is None else argv:
        if os.path.exists(path):
            with open(path) as f:
                for line in filter(str.strip, f):
                    entry = json.loads(line)
                    entries.append((entry["suite"], entry["reason"], entry["tests"]))
    print("Skipped tests, by suite and reason (%d):" % sum(len(nodeids) for _, _, nodeids in entries))
    for line in listing(entries) or ["    none"]:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
