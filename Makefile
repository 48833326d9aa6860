# The two set-up commands (README): `make demo` builds everything and runs the demo;
# `make test` runs every test. Both install the Debian packages they need when run as root.
APT_PACKAGES := libsqlite3-dev libssh-dev sqlite3 openssh-server openssh-client faketime mtools dosfstools
SWIFT ?= swift

.PHONY: deps build demo test bench format

deps:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" = 0 ]; then \
			apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y $$missing; \
		else \
			echo "missing Debian packages:$$missing (run as root, or: sudo apt-get install$$missing)"; exit 1; \
		fi; \
	fi

build: deps
	$(SWIFT) build

demo: build
	scripts/demo.sh

test: deps
	SWIFT=$(SWIFT) scripts/test.sh

bench: deps
	$(SWIFT) build -c release --product sqsync
	$(SWIFT) build -c release --product sqsync-bench
	.build/release/sqsync-bench
