#!/usr/bin/env bash
# Regenerates crates/peakplan-core/tests/data/traced/COVERAGE.md from the traced files and untraced.csv (the core
# test `coverage`, which also fails when a plan key's value has neither a trace nor a reason). The *_cpu.sh
# scripts call it after rewriting their data, so the table follows the traces.
source "$(dirname "$0")/lib.sh"
cd "$here/../.."
UPDATE_COVERAGE=1 cargo test -p peakplan-core --test core coverage
