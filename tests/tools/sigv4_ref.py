#!/usr/bin/env python3
"""Reference SigV4 signatures for kiln's tests, from botocore (an implementation
independent of kiln's): reads one request per line on stdin, writes botocore's
Authorization header for it on stdout, one line each.

Each input line is tab-separated fields, each the hex of UTF-8 bytes (so keys with any
character survive the trip):

  S  method  endpoint  raw-path  params  headers  body  access  secret  token  region  timestamp
     botocore encodes the raw path (quote, safe "/~", as its S3 serializer does) and the
     query parameters itself.
  W  method  url  headers  body  access  secret  token  region  timestamp
     a request as it arrived on the wire: path and query are taken as sent.

params and headers are lists: entries separated by \\x01, name and value by \\x00.
token is empty for none. The timestamp (YYYYMMDDTHHMMSSZ) replaces botocore's clock.
"""
import datetime
import sys
import types
import urllib.parse

import botocore.auth
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials


def fixed_clock(stamp):
    """botocore reads the time inside add_auth; hand it the test's instant instead."""
    moment = datetime.datetime.strptime(stamp, "%Y%m%dT%H%M%SZ")

    class Clock(datetime.datetime):
        @classmethod
        def utcnow(cls):
            return moment

        @classmethod
        def now(cls, tz=None):
            return moment.replace(tzinfo=tz) if tz else moment

    botocore.auth.datetime = types.SimpleNamespace(
        datetime=Clock, timezone=datetime.timezone, timedelta=datetime.timedelta)
    # Newer botocore (not Debian 12's) reads the clock through this helper instead.
    if hasattr(botocore.auth, "get_current_datetime"):
        botocore.auth.get_current_datetime = lambda *args, **kwargs: moment


def pairs(field):
    if not field:
        return []
    out = []
    for entry in field.split(b"\x01"):
        name, _, value = entry.partition(b"\x00")
        out.append((name.decode("utf-8"), value.decode("utf-8")))
    return out


def sign(url, params, headers, body, access, secret, token, region, stamp, method):
    fixed_clock(stamp)
    request = AWSRequest(method=method, url=url, data=body, headers=dict(headers),
                         params=params or None)
    creds = Credentials(access, secret, token or None)
    S3SigV4Auth(creds, "s3", region).add_auth(request)
    return request.headers["Authorization"]


def main():
    for line in sys.stdin:
        line = line.rstrip("\n")
        if not line:
            continue
        kind, *fields = line.split("\t")
        raw = [bytes.fromhex(f) for f in fields]
        if kind == "S":
            (method, endpoint, path, params, headers, body, access, secret, token, region,
             stamp) = raw
            url = endpoint.decode() + urllib.parse.quote(path.decode("utf-8"), safe="/~")
            auth = sign(url, pairs(params), pairs(headers), body, access.decode(),
                        secret.decode(), token.decode(), region.decode(), stamp.decode(),
                        method.decode())
        elif kind == "W":
            method, url, headers, body, access, secret, token, region, stamp = raw
            auth = sign(url.decode("utf-8"), [], pairs(headers), body, access.decode(),
                        secret.decode(), token.decode(), region.decode(), stamp.decode(),
                        method.decode())
        else:
            raise SystemExit("sigv4_ref.py: unknown request kind " + repr(kind))
        print(auth, flush=True)


if __name__ == "__main__":
    main()
