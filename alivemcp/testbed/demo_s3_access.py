"""Demo part: an S3 access point on moto and Object Lambda access points on the stand-in.

Creates a tenant bucket with an access point (read by ``s3_access_point``), a backing bucket
for the PII canary, and two Object Lambda access points: a correct redactor and one that fails
open (returns the raw document), so the demo shows the loud verdict the probe exists for.
"""

from __future__ import annotations

from alivemcp.plumbing.aws import AwsClients, AwsSettings
from alivemcp.testbed.moto import ACCOUNT_ID, moto_settings
from alivemcp.testbed.object_lambda import ObjectLambdaStandIn, TransformMode
from alivemcp.testbed.stack import DemoStack

__all__ = ["start"]

TENANT_BUCKET = "demo-tenant-data"
TENANT_KEY = "data/tenant-a/profile.json"
BACKING_BUCKET = "demo-olap-backing"
LOOPBACK = "127.0.0.1"


async def start(stack: DemoStack) -> None:
    moto = stack.moto
    clients = AwsClients()
    try:
        s3 = await clients.client("s3", _settings(moto.url))
        control = await clients.client("s3control", _settings(moto.localhost_url))
        await s3.create_bucket(Bucket=TENANT_BUCKET)
        await s3.put_object(Bucket=TENANT_BUCKET, Key=TENANT_KEY, Body=b'{"tenant": "a"}\n')
        created = await control.create_access_point(
            AccountId=ACCOUNT_ID, Name="demo-tenant-a", Bucket=TENANT_BUCKET
        )
        await s3.create_bucket(Bucket=BACKING_BUCKET)
    finally:
        await clients.aclose()

    stand_in = ObjectLambdaStandIn(moto).start()
    stack.add_cleanup(stand_in.stop)
    clean = stand_in.add_access_point("demo-pii-clean", BACKING_BUCKET, TransformMode.REDACT)
    leaky = stand_in.add_access_point("demo-pii-leaky", BACKING_BUCKET, TransformMode.FAIL_OPEN)

    stack.set_env("DEMO_S3_ACCESSPOINT_URL", f"http://s3-accesspoint.localhost:{moto.port}")
    stack.set_env("DEMO_ACCESS_POINT_ARN", str(created["AccessPointArn"]))
    stack.set_env("DEMO_ACCESS_POINT_KEY", TENANT_KEY)
    stack.set_env("DEMO_OLAP_URL", stand_in.endpoint_url)
    stack.set_env("DEMO_OLAP_ARN", clean)
    stack.set_env("DEMO_OLAP_LEAKY_ARN", leaky)
    stack.set_env("DEMO_OLAP_BACKING_BUCKET", BACKING_BUCKET)
    stack.note(
        f"Object Lambda stand-in: {stand_in.endpoint_url} (demo-pii-clean redacts, "
        "demo-pii-leaky fails open on purpose: its check is down)"
    )


def _settings(endpoint: str) -> AwsSettings:
    return moto_settings(endpoint, resolve_all_to=LOOPBACK)
