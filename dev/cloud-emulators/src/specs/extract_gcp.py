#!/usr/bin/env python3
"""Extracts the subset of the Compute Engine v1 discovery document that the GCP emulator serves
(dev/cloud-emulators/src/gcp/http.rs) into gcp-compute-v1.subset.json.

Source: the discovery document as google-api-python-client 2.202.0 ships it
(googleapiclient/discovery_cache/documents/compute.v1.json; Apache License 2.0), the document Google publishes at
https://compute.googleapis.com/$discovery/rest?version=v1 (revision in the output's "revision").

    pip download google-api-python-client==2.202.0 --no-deps && unzip -o google_api_python_client-2.202.0-py3-none-any.whl \
        googleapiclient/discovery_cache/documents/compute.v1.json
    python3 extract_gcp.py googleapiclient/discovery_cache/documents/compute.v1.json > gcp-compute-v1.subset.json

Kept: the methods below with their parameters, request and response, every schema they reach, and the document's
standard parameters, each as published except that "description" texts are dropped (size).
"""
import json
import sys

METHODS = {
    "instanceGroupManagers": ["aggregatedList", "get", "createInstances", "deleteInstances", "listManagedInstances",
                              "setInstanceTemplate"],
    "instances": ["get"],
    "disks": ["get"],
    "instanceTemplates": ["list", "insert", "get", "delete"],
    "zoneOperations": ["get", "wait"],
    "globalOperations": ["get", "wait"],
}


def strip(value):
    if isinstance(value, dict):
        # Documentation texts only: a property named "description" (a schema, not a string) stays.
        return {k: strip(v) for k, v in value.items()
                if not (k in ("description", "enumDescriptions") and not isinstance(v, dict))}
    if isinstance(value, list):
        return [strip(v) for v in value]
    return value


def refs(value, found):
    if isinstance(value, dict):
        for k, v in value.items():
            if k == "$ref" and isinstance(v, str):
                found.add(v)
            else:
                refs(v, found)
    elif isinstance(value, list):
        for v in value:
            refs(v, found)


def main(path):
    doc = json.load(open(path))
    resources = {}
    wanted = set()
    for resource, methods in METHODS.items():
        kept = {}
        for name in methods:
            method = doc["resources"][resource]["methods"][name]
            kept[name] = strip(method)
            refs(method, wanted)
        resources[resource] = {"methods": kept}
    schemas = {}
    while wanted - schemas.keys():
        name = sorted(wanted - schemas.keys())[0]
        schema = doc["schemas"][name]
        schemas[name] = strip(schema)
        refs(schema, wanted)
    out = {
        "x-fixture": {
            "source": "Compute Engine API v1 discovery document, https://compute.googleapis.com/$discovery/rest?version=v1, "
                      "as shipped in google-api-python-client 2.202.0 "
                      "(googleapiclient/discovery_cache/documents/compute.v1.json)",
            "licence": "google-api-python-client is under the Apache License 2.0; the discovery document is Google's "
                       "published description of its public API",
            "subset": "the methods the GCP emulator serves, every schema they reach, the standard parameters; "
                      "description texts dropped; extracted by extract_gcp.py beside this file",
        },
        "kind": doc["kind"],
        "name": doc["name"],
        "version": doc["version"],
        "revision": doc["revision"],
        "rootUrl": doc["rootUrl"],
        "servicePath": doc["servicePath"],
        "parameters": strip(doc["parameters"]),
        "resources": resources,
        "schemas": dict(sorted(schemas.items())),
    }
    json.dump(out, sys.stdout, indent=1, sort_keys=False)
    sys.stdout.write("\n")


main(sys.argv[1])
