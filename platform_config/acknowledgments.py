"""Which of a config's warnings its ``acknowledgedWarnings`` accept, and which acknowledgments accept nothing.

The warnings themselves are the constructs' (``PlatformConfig.warnings``, decided by their ``warn_*`` functions);
this module only sorts them against the file's acknowledgments, for the config check (``python -m
platform_config``) and the synth (app.py) to print the same report:

* a warning no acknowledgment names: printed with its key path and id, and how to acknowledge it;
* a warning acknowledged: listed with the acknowledgment's reason (the review a reader wants to see);
* an acknowledgment of a warning the file never raises (stale: the risk was fixed, or the id is misspelt): it
  would silently accept the warning if the risk came back, so it is reported, to be removed;
* an acknowledgment of a warning decided only at synth (:data:`DECIDED_AT_SYNTH`): kept, not judged here.
"""

from __future__ import annotations

from dataclasses import dataclass

from hyperpod_inference_iac import WARNINGS, RiskWarning
from hyperpod_inference_iac.foundation.risks import warning_id
from platform_config.model import AcknowledgedWarning, PlatformConfig

# Warnings that depend on more than the file: a custom resource change the operator cannot apply in place is found
# against the previous dist/ (InferenceWorkloads.warn_about_replacements), at synth only.
DECIDED_AT_SYNTH = frozenset({warning_id("InferenceWorkloads:needsReplacement")})


@dataclass(frozen=True)
class Stale:
    acknowledgment: AcknowledgedWarning
    why: str

    def __str__(self) -> str:
        return f"{self.acknowledgment.path}: {self.acknowledgment.id} {self.why}; remove the acknowledgment"


@dataclass(frozen=True)
class WarningReview:
    unacknowledged: tuple[RiskWarning, ...]
    acknowledged: tuple[tuple[AcknowledgedWarning, tuple[RiskWarning, ...]], ...]  # each with what it accepts
    decided_at_synth: tuple[AcknowledgedWarning, ...]
    stale: tuple[Stale, ...]

    def accepted_lines(self) -> list[str]:
        """The acknowledged warnings, each acknowledgment once with the key paths it covers and its reason."""
        lines = []
        for ack, warnings in self.acknowledged:
            paths = ", ".join(dict.fromkeys(w.path for w in warnings))
            lines.append(f"  - [{ack.id}] {paths}: acknowledged at {ack.path}: {ack.reason}")
        for ack in self.decided_at_synth:
            lines.append(f"  - [{ack.id}] acknowledged at {ack.path} (decided at synth, not from the file alone): "
                         f"{ack.reason}")
        return lines

    def warning_lines(self, source: str) -> list[str]:
        """The unacknowledged warnings and the stale acknowledgments, with how to act on each."""
        lines = []
        if self.unacknowledged:
            lines.append(f"Warning: {len(self.unacknowledged)} risky choice(s) in {source} not acknowledged:")
            lines += [f"  - {warning}" for warning in self.unacknowledged]
            lines.append("  Change them, or accept each in the file with the reason a reviewer reads:")
            lines.append("    acknowledgedWarnings:")
            for id_ in dict.fromkeys(w.id for w in self.unacknowledged):
                lines.append(f'      - id: "{id_}"')
                lines.append('        reason: "<why this platform accepts it: at least 10 characters>"')
        if self.stale:
            lines.append(f"Warning: {len(self.stale)} stale acknowledgment(s) in {source}:")
            lines += [f"  - {stale}" for stale in self.stale]
        return lines


def review_warnings(config: PlatformConfig) -> WarningReview:
    raised: dict[str, list[RiskWarning]] = {}
    for warning in config.warnings:
        raised.setdefault(warning.id, []).append(warning)
    acknowledged, at_synth, stale = [], [], []
    first: dict[str, AcknowledgedWarning] = {}
    for ack in config.acknowledged_warnings:
        if ack.id in first:
            stale.append(Stale(ack, f"is acknowledged already at {first[ack.id].path}"))
            continue
        first[ack.id] = ack
        if ack.id in raised:
            acknowledged.append((ack, tuple(raised[ack.id])))
        elif ack.id in DECIDED_AT_SYNTH:
            at_synth.append(ack)
        elif ack.id in WARNINGS:
            stale.append(Stale(ack, "is not raised by anything in this file"))
        else:
            stale.append(Stale(ack, "is no warning of this library (misspelt, or removed in an upgrade)"))
    unacknowledged = tuple(w for w in config.warnings if w.id not in first)
    return WarningReview(unacknowledged, tuple(acknowledged), tuple(at_synth), tuple(stale))
