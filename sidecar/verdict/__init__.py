"""The verdict: facts in, verdict out. Pure: no I/O, no clock, no globals.

`decide(facts)` answers "where does this job's compute go" with a status (GPU, CPU, MIXED,
UNKNOWN), a message, and the warnings (`Finding`s) whose conditions hold in this poll. Messages and
hints are references into the one catalogue (sidecar/common/catalogue.py, static/shared/i18n/*.json), never text:
the document renders them in English, the page and the plugin in the user's language. Each warning
is one rule in `RULES` (rules.py); tests drive them with tables of facts. Hysteresis (so no warning
flaps between two polls) is a separate pure step, `settle` (hysteresis.py), that carries a small state
from one poll to the next.

    facts.py       the facts, the value types (Finding, Verdict) and device helpers
    rules.py       the rules
    efficiency.py  the efficiency rules (clocks, PCIe, GPM, precision, syncs, data wait, MIG)
    stragglers.py  the rank the others wait for (straggler-rank), from the ranks' step breakdowns
    status.py      status and message, decide()
    wheels.py      the CUDA wheels of each torch version, the one to suggest for a driver
    hysteresis.py  settle()
    compare.py     two runs compared (issue 40): IMPROVEMENT / REGRESSION / WITHIN NOISE of the
                   throughput and the GPU busy share, the causes ranked; compare_reasons.py: why a
                   part of the step changed (imported as sidecar.verdict.compare, not re-exported)
    codes.py       every warning code's group (what the user should do) and summary; codes_docs.py
                   generates the README's table of codes from it and the rules
"""

from sidecar.verdict import efficiency, facts, hysteresis, rules, status
from sidecar.verdict.efficiency import *  # noqa: F403
from sidecar.verdict.facts import *  # noqa: F403
from sidecar.verdict.hysteresis import *  # noqa: F403
from sidecar.verdict.rules import *  # noqa: F403
from sidecar.verdict.status import *  # noqa: F403

__all__ = [*facts.__all__, *efficiency.__all__, *rules.__all__, *hysteresis.__all__, *status.__all__]
