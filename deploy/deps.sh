#!/usr/bin/env bash
# deps.sh: installs the Debian packages cdc needs for the named purposes, when any is missing.
# Usage: deploy/deps.sh [build] [test] [bench] [package] [runtime]   (no argument: build test)
# Does nothing, quickly and without apt-get update, when everything is already installed.
set -euo pipefail

build_pkgs=(build-essential pkg-config libpq-dev librdkafka-dev libprotobuf-c-dev protobuf-c-compiler
	libevent-dev libyaml-dev libjemalloc-dev libmicrohttpd-dev libjson-c-dev libsystemd-dev libssl-dev
	libcurl4-openssl-dev clang libavro-dev libnats-dev)
# python3-yaml and nodejs (npm runs tests/deploy's pinned validator) for tests/integration/test_deploy.py;
# openssl makes the certificates of tests/integration/test_security.py; clang-format checks the C sources;
# prometheus (promtool and the server) checks deploy/monitoring's rules and dashboard queries.
# tests/package installs the package's files into a throwaway root and checks them as a user meets
# them: systemd-analyze (systemd), man -l (man-db, groff-base), the Python client in a fresh venv
# (python3-venv; built with python3-setuptools, python3-wheel and python3-build). gdb holds a
# PostgreSQL backend in the middle of creating a slot (tests/integration/test_failures.py).
# nats-server (with JetStream) is the server of sink: nats's tests; they read it with the nats npm
# package (tests/nats, pinned in its package-lock.json), which runs on nodejs. python3-avro (Apache
# Avro's own library) decodes format: avro's records and checks schemas' compatibility in
# tests/registry_double.py. curl runs cdc doctor's fix of a registry subject as printed (test_doctor.py).
test_pkgs=(postgresql python3-pytest python3-psycopg2 python3-protobuf python3-confluent-kafka python3-avro
	python3-prometheus-client protobuf-compiler jq kcat valgrind python3-yaml nodejs openssl clang-format prometheus
	systemd man-db groff-base python3-venv python3-setuptools python3-wheel python3-build gdb nats-server curl)
# bench drives the same server and client tools as the tests (pg_recvlogical comes with
# postgresql), the subscriber client (python3-protobuf, protoc), GNU time for peak RSS, and
# nats-server with the nats npm client (nodejs) for the NATS drain.
bench_pkgs=(postgresql postgresql-contrib postgresql-15-wal2json python3-psycopg2 python3-protobuf protobuf-compiler
	time python3-matplotlib nats-server nodejs)
# make deb: Debian's packaging tools (dpkg-buildpackage, debhelper, lintian).
package_pkgs=(dpkg-dev debhelper lintian)
runtime_pkgs=(libpq5 librdkafka1 libprotobuf-c1 libevent-2.1-7 libyaml-0-2 libjemalloc2 libmicrohttpd12 libjson-c5
	libsystemd0 libnats3.4 libssl3 libcurl4)

usage() {
	echo "usage: $0 [build] [test] [bench] [package] [runtime]" >&2
	exit 2
}

purposes=("$@")
[ ${#purposes[@]} -eq 0 ] && purposes=(build test)

wanted=()
for p in "${purposes[@]}"; do
	case "$p" in
	build) wanted+=("${build_pkgs[@]}") ;;
	test) wanted+=("${test_pkgs[@]}") ;;
	bench) wanted+=("${bench_pkgs[@]}") ;;
	package) wanted+=("${package_pkgs[@]}") ;;
	runtime) wanted+=("${runtime_pkgs[@]}") ;;
	-h | --help) usage ;;
	*)
		echo "deps.sh: unknown purpose '$p'" >&2
		usage
		;;
	esac
done

# A package is present when its status is "install ok installed".
missing=()
for pkg in "${wanted[@]}"; do
	status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
	if [ "$status" != "install ok installed" ]; then
		case " ${missing[*]-} " in
		*" $pkg "*) ;;
		*) missing+=("$pkg") ;;
		esac
	fi
done

[ ${#missing[@]} -eq 0 ] && exit 0

echo "deps.sh: installing ${missing[*]}" >&2
sudo=()
if [ "$(id -u)" -ne 0 ]; then
	if command -v sudo >/dev/null 2>&1; then
		sudo=(sudo)
	else
		echo "deps.sh: missing packages (${missing[*]}) and not root; install them as root" >&2
		exit 1
	fi
fi

export DEBIAN_FRONTEND=noninteractive
if ! "${sudo[@]}" apt-get update -q; then
	echo "deps.sh: apt-get update failed; cannot install: ${missing[*]}" >&2
	exit 1
fi
if ! "${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"; then
	echo "deps.sh: apt-get install failed for: ${missing[*]}" >&2
	exit 1
fi
echo "deps.sh: installed ${missing[*]}" >&2
