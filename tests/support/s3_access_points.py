"""Set-up helpers for the access point and Object Lambda tests (moto over HTTP + the stand-in).

botocore sends access-point and Object Lambda calls to ``<name>-<account>.<endpoint host>``;
moto recognises access-point hosts when the endpoint host contains ``s3-accesspoint.``, and
every such name is resolved to 127.0.0.1 by the plumbing's ``resolve_all_to``.
"""

from __future__ import annotations

import json
from typing import Any

import boto3

from alivemcp.plumbing.aws import AwsClients, AwsSettings
from alivemcp.testbed.moto import ACCOUNT_ID, MotoServer
from alivemcp.testbed.object_lambda import ObjectLambdaStandIn

LOOPBACK = "127.0.0.1"


def access_point_endpoint(moto: MotoServer) -> str:
    return f"http://s3-accesspoint.localhost:{moto.port}"


def access_point_aws(moto: MotoServer) -> dict[str, Any]:
    """The probe's ``aws:`` block for reads through access-point ARNs on moto."""
    return moto.aws_params(endpoint_url=access_point_endpoint(moto), resolve_all_to=LOOPBACK)


def s3(moto: MotoServer) -> Any:
    return boto3.client("s3", **moto.boto3_kwargs())


async def create_access_point(moto: MotoServer, name: str, bucket: str) -> str:
    """Create an access point through the real s3control API on moto; returns its ARN."""
    clients = AwsClients()
    try:
        settings = AwsSettings(
            region="us-east-1",
            endpoint_url=moto.localhost_url,
            resolve_all_to=LOOPBACK,
            max_attempts=1,
            access_key_id="testing",  # type: ignore[arg-type]
            secret_access_key="testing",  # type: ignore[arg-type]
        )
        control = await clients.client("s3control", settings)
        resp = await control.create_access_point(AccountId=ACCOUNT_ID, Name=name, Bucket=bucket)
        return str(resp["AccessPointArn"])
    finally:
        await clients.aclose()


def deny_reads_policy(bucket: str) -> str:
    """A bucket policy denying every read: what a drifted delegation policy looks like."""
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Deny",
                    "Principal": "*",
                    "Action": ["s3:GetObject", "s3:HeadObject"],
                    "Resource": f"arn:aws:s3:::{bucket}/*",
                }
            ],
        }
    )


def object_lambda_aws(moto: MotoServer, stand_in: ObjectLambdaStandIn) -> dict[str, Any]:
    """The probe's ``aws:`` block for reads through Object Lambda ARNs served by the stand-in."""
    return moto.aws_params(endpoint_url=stand_in.endpoint_url, resolve_all_to=LOOPBACK)


#: The bucket the Object Lambda stand-in reads from.
BACKING = "raw-docs"
