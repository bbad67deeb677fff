"""A test probe that passes on whatever a hostile target could have sent: its params are JSON
texts decoded at run time, so they can hold what YAML cannot (lone surrogates, control
characters, huge or deep structures) exactly as a target's JSON answer can."""

from __future__ import annotations

import json
from typing import Any

from pydantic import Field, SecretStr

from alivemcp.probe import (
    LabeledObservation,
    Observable,
    Probe,
    ProbeParams,
    ProbeResult,
    Status,
)


class HostileParams(ProbeParams):
    status: Status = Status.DOWN
    reason_json: str = Field('"ok"', description="JSON string: the reason.")
    label_json: str = Field('"x"', description="JSON string: a labelled observation's label.")
    details_json: str = Field("{}", description="JSON object: the details.")
    token: SecretStr | None = Field(None, description="A credential; its length is observed.")
    extra_label: str | None = Field(None, description="An undeclared label to add.")


class HostileProbe(Probe[HostileParams]):
    Params = HostileParams
    observables = (
        Observable("server_info", "The name the target gave.", ("server_name",)),
        Observable("token_length", "Length of the configured credential."),
    )

    async def probe(self) -> ProbeResult:
        p = self.params
        details: Any = json.loads(p.details_json)
        return ProbeResult(
            p.status,
            json.loads(p.reason_json),
            labeled_observations=[
                LabeledObservation(
                    "server_info",
                    1,
                    {
                        "server_name": json.loads(p.label_json),
                        **({p.extra_label: "x"} if p.extra_label else {}),
                    },
                )
            ],
            details=details,
            observations={"token_length": float(len(p.token.get_secret_value()))}
            if p.token
            else {},
        )
