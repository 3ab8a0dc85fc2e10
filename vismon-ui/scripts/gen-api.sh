#!/usr/bin/env bash
# gen-api.sh - regenerate vismon-ui's typed client from clavisd's OpenAPI document:
# openapi.json (python -m clavis.service.openapi_doc, from the project's venv), then
# src/api/schema.ts (openapi-typescript). Both are committed; tests check they are current
# (solver/tests/service/test_ui_openapi.py and tests/api-current.test.ts).
set -euo pipefail
cd "$(dirname "$0")/.."
../.venv/bin/python -m clavis.service.openapi_doc openapi.json
npx --no-install openapi-typescript openapi.json -o src/api/schema.ts
