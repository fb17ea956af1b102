#!/usr/bin/env bash
# Regenerates the Go code for proto/muster/v1 with buf and the plugins pinned
# in the tools module (tools/go.mod), which keeps them out of the product's go.mod.
set -euo pipefail
cd "$(dirname "$0")"
go tool -modfile=../tools/go.mod buf lint
go tool -modfile=../tools/go.mod buf generate
