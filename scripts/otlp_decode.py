#!/usr/bin/env python3
"""Decode an OTLP/HTTP protobuf trace export (stdin) into OTLP/JSON (stdout).

The decoder is OpenTelemetry's own generated code (the `opentelemetry-proto` package), so the
tests check the function's hand-written protobuf encoding against the protocol's definition, not
against a model of it. The JSON follows OTLP/JSON's mapping: ids as lower-case hex, enums as
numbers, 64-bit integers as decimal strings, camelCase field names.
"""

import base64
import json
import sys

from google.protobuf.json_format import MessageToDict
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)

ID_FIELDS = ("traceId", "spanId", "parentSpanId")


def hex_ids(value):
    """OTLP/JSON writes ids as hex where protobuf's JSON mapping writes base64."""
    if isinstance(value, dict):
        return {
            key: (base64.b64decode(item).hex() if key in ID_FIELDS else hex_ids(item))
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [hex_ids(item) for item in value]
    return value


def main():
    request = ExportTraceServiceRequest()
    # ParseFromString refuses what is not a valid encoding of the message: the test fails.
    request.ParseFromString(sys.stdin.buffer.read())
    decoded = MessageToDict(request, use_integers_for_enums=True)
    json.dump(hex_ids(decoded), sys.stdout)


if __name__ == "__main__":
    main()
