#!/usr/bin/env bash
# Regenerates the Go code for proto/muster/v1 with buf and the plugins pinned
# as tool dependencies in go.mod.
set -euo pipefail
cd "$(dirname "$0")"
go tool buf lint
go tool buf generate
