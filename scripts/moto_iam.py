#!/usr/bin/env python3
"""Turns moto's IAM authentication on, for tests whose requests must pass a signature check.

Usage: moto_iam.py ENDPOINT

With authentication still off, creates an IAM user with an allow-all inline policy and an
access key, and a role the user may assume; then turns authentication on (`POST
/moto-api/reset-auth` with body `0`: every request from then on must be signed by a key moto
knows). Prints one JSON object: the user's long-term key, and session credentials (an access
key, a secret and a session token) from assuming the role with it, so a test can sign with and
without a session token. A request signed with a wrong secret is then refused
(`SignatureDoesNotMatch`, or `InvalidClientTokenId` for an unknown key).
"""

import json
import sys
import urllib.request

import boto3

REGION = "us-east-1"
ALLOW_ALL = json.dumps({
    "Version": "2012-10-17",
    "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}],
})


def client(service, endpoint, **credentials):
    return boto3.client(
        service,
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id=credentials.get("key", "bootstrap"),
        aws_secret_access_key=credentials.get("secret", "bootstrap"),
        aws_session_token=credentials.get("token"),
    )


def main():
    endpoint = sys.argv[1]
    iam = client("iam", endpoint)
    iam.create_user(UserName="signer")
    iam.put_user_policy(UserName="signer", PolicyName="all", PolicyDocument=ALLOW_ALL)
    key = iam.create_access_key(UserName="signer")["AccessKey"]
    account = client("sts", endpoint).get_caller_identity()["Account"]
    trust = json.dumps({
        "Version": "2012-10-17",
        "Statement": [{
            "Effect": "Allow",
            "Principal": {"AWS": f"arn:aws:iam::{account}:user/signer"},
            "Action": "sts:AssumeRole",
        }],
    })
    role = iam.create_role(RoleName="signer-role", AssumeRolePolicyDocument=trust)["Role"]
    iam.put_role_policy(RoleName="signer-role", PolicyName="all", PolicyDocument=ALLOW_ALL)
    # A text body: a form content type leaves the body empty and moto answers 500.
    request = urllib.request.Request(
        f"{endpoint}/moto-api/reset-auth", data=b"0", method="POST",
        headers={"Content-Type": "text/plain"},
    )
    urllib.request.urlopen(request).read()
    user = {"key": key["AccessKeyId"], "secret": key["SecretAccessKey"]}
    session = client("sts", endpoint, **user).assume_role(
        RoleArn=role["Arn"], RoleSessionName="signed-test"
    )["Credentials"]
    print(json.dumps({
        "access_key_id": user["key"],
        "secret_access_key": user["secret"],
        "session": {
            "access_key_id": session["AccessKeyId"],
            "secret_access_key": session["SecretAccessKey"],
            "session_token": session["SessionToken"],
        },
    }))


if __name__ == "__main__":
    main()
