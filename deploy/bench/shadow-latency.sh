#!/usr/bin/env bash
# Primary latency with shadow mode on vs off, at p99, against a legacy target
# that hangs and one ten times slower than the primary. Fails if shadow mode
# adds more than 5%. Then resident memory over 30000 requests with the legacy
# target down. The dist build (Cargo.toml); run it on an otherwise idle machine.
set -euo pipefail
cd "$(dirname "$0")/../.."
exec cargo test --profile dist --test it shadow::shadow_ \
  -- --ignored --nocapture --test-threads 1
