# The two set-up commands (README): `make demo` builds everything and runs the demo;
# `make test` runs every test. Both install the Debian packages they need when run as root.
# `make install [PREFIX=/usr/local] [DESTDIR=]`, `make deb` and `make tarball` ship a release
# build that needs no Swift toolchain on the site machine.
APT_PACKAGES := libsqlite3-dev libssh-dev zlib1g-dev sqlite3 openssh-server openssh-client faketime mtools dosfstools binutils python3 age rclone
SWIFT ?= swift
PREFIX ?= /usr/local
DESTDIR ?=
# Where `make deb` and `make tarball` write their file.
OUT ?= .

# The version is written down once, in Sources/sqsync/Version.swift.
VERSION := $(shell sed -n 's/^let sqsyncVersion = "\(.*\)"$$/\1/p' Sources/sqsync/Version.swift)
ARCH := $(shell dpkg --print-architecture)

# Release files are built in their own scratch folder: the static link never thrashes the
# debug build or `make bench`, and `make install` can run while `swift test` holds `.build`.
DIST := .build-dist
RELEASE_BIN := $(DIST)/release/sqsync
MANPAGE := $(DIST)/share/sqsync.1
COMPLETIONS := $(DIST)/share/completion.bash $(DIST)/share/completion.zsh $(DIST)/share/completion.fish
DEB := $(OUT)/sqsync_$(VERSION)_$(ARCH).deb
TARBALL := $(OUT)/sqsync-$(VERSION)-linux-$(ARCH).tar.gz

.PHONY: deps test-deps build demo test test-install fuzz bench format dist install deb tarball FORCE

deps:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" = 0 ]; then \
			apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y $$missing; \
		else \
			echo "missing Debian packages:$$missing (run as root, or: sudo apt-get install$$missing)"; exit 1; \
		fi; \
	fi

# The S3 server the rclone mailbox tests and the bench talk to (PyPI's moto): installed for
# `make test` and `make bench` only, never by a build or a package.
test-deps: deps
	@if ! command -v moto_server >/dev/null 2>&1; then \
		if [ "$$(id -u)" = 0 ]; then \
			python3 -m pip install --quiet 'moto[server]' || python3 -m pip install --quiet --break-system-packages 'moto[server]' \
				|| echo "note: pip could not install moto[server]; the S3 mailbox tests need moto_server"; \
		else \
			echo "note: moto_server is missing (pip install 'moto[server]'); the S3 mailbox tests will be skipped"; \
		fi; \
	fi

# The debug build carries no debug information: the tests need none, and without it a clean
# build takes a tenth less time on 2 cores. `make build` and `make test` share the flags, so
# one builds on the other's work (scripts/test.sh reads them as SQSYNC_BUILD_FLAGS). To run a
# few tests on that build: `swift build --build-tests -debug-info-format none`, then
# `swift test --skip-build --filter NAME`.
DEBUG_BUILD_FLAGS ?= -debug-info-format none
export SQSYNC_BUILD_FLAGS := $(DEBUG_BUILD_FLAGS)

build: deps
	$(SWIFT) build $(DEBUG_BUILD_FLAGS)

demo: build
	scripts/demo.sh

# Every test but the packaging ones, on the debug build: ~3 min to build on 2 cores from a clean
# clone, ~6 min of tests.
test: test-deps
	SWIFT=$(SWIFT) scripts/test.sh

# The packaging tests (InstallTests: `make install`, `make deb`, `make tarball` and the shipped
# binary on a machine without Swift): they need the static release build (~7 min), so they run
# apart from `make test`. .ci/run runs both.
test-install: test-deps dist
	SWIFT=$(SWIFT) SQSYNC_TEST_SUITES=InstallTests scripts/test.sh

# Many seeds of the network fuzz (random topologies, late joiners, lost files), the scope
# property test and the malicious-replica fuzz (a stolen key's thief included, one that sets
# its file's numbers back too); `make test` runs two to four of each. FUZZ_SEEDS sets how many.
FUZZ_SEEDS ?= 200
fuzz: deps
	$(SWIFT) build --build-tests $(DEBUG_BUILD_FLAGS)
	SQSYNC_PROPERTY_SEEDS=$(FUZZ_SEEDS) $(SWIFT) test --skip-build --disable-swift-testing --filter 'NetworkFuzzTests|ScopePropertyTests|MaliciousReplicaFuzzTests'

bench: test-deps
	$(SWIFT) build -c release --product sqsync
	$(SWIFT) build -c release --product sqsync-bench
	.build/release/sqsync-bench

# SwiftPM decides whether the binary is stale, so it always gets asked; the files made from the
# binary are remade only when it changed.
$(RELEASE_BIN): deps FORCE
	$(SWIFT) build --scratch-path $(DIST) -c release --static-swift-stdlib --product sqsync

# The man page comes from the command definitions (argument-parser's manual generator). The
# plugin builds the package itself: a debug build in `.build` with the tests' flags, the one
# the tests use anyway, so it leaves the static release link alone and the test build then has
# nothing to do again. It runs before the tests, never during them.
$(MANPAGE): $(RELEASE_BIN) packaging/man-tail.mdoc
	$(SWIFT) package $(DEBUG_BUILD_FLAGS) plugin generate-manual --configuration debug
	mkdir -p $(@D)
	sed '/^\.Sh "EXIT STATUS"/,$$d' .build/plugins/GenerateManual/outputs/sqsync/sqsync.1 > $@.tmp
	cat packaging/man-tail.mdoc >> $@.tmp
	mv $@.tmp $@

$(DIST)/share/completion.%: $(RELEASE_BIN)
	mkdir -p $(@D)
	$(RELEASE_BIN) --generate-completion-script $* > $@.tmp
	mv $@.tmp $@

dist: $(RELEASE_BIN) $(MANPAGE) $(COMPLETIONS)

install: dist
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/man/man1 \
		$(DESTDIR)$(PREFIX)/share/bash-completion/completions $(DESTDIR)$(PREFIX)/share/zsh/site-functions \
		$(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d $(DESTDIR)$(PREFIX)/share/doc/sqsync/examples
	install -m 0755 $(RELEASE_BIN) $(DESTDIR)$(PREFIX)/bin/sqsync
	strip $(DESTDIR)$(PREFIX)/bin/sqsync
	install -m 0644 $(MANPAGE) $(DESTDIR)$(PREFIX)/share/man/man1/sqsync.1
	install -m 0644 $(DIST)/share/completion.bash $(DESTDIR)$(PREFIX)/share/bash-completion/completions/sqsync
	install -m 0644 $(DIST)/share/completion.zsh $(DESTDIR)$(PREFIX)/share/zsh/site-functions/_sqsync
	install -m 0644 $(DIST)/share/completion.fish $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d/sqsync.fish
	sed 's|@BINDIR@|$(PREFIX)/bin|g' packaging/sqsync.service > $(DESTDIR)$(PREFIX)/share/doc/sqsync/examples/sqsync.service
	install -m 0644 packaging/sqsync.timer $(DESTDIR)$(PREFIX)/share/doc/sqsync/examples/sqsync.timer
	install -m 0644 packaging/copyright $(DESTDIR)$(PREFIX)/share/doc/sqsync/copyright

# A .deb made with dpkg-deb alone; Depends lists the packages of the libraries the binary links.
deb: dist
	rm -rf $(DIST)/deb
	$(MAKE) install DESTDIR=$(DIST)/deb PREFIX=/usr
	gzip -9n $(DIST)/deb/usr/share/man/man1/sqsync.1
	install -d $(DIST)/deb/DEBIAN
	packaging/deb-control.sh $(VERSION) $(ARCH) $(RELEASE_BIN) $(DIST)/deb > $(DIST)/deb/DEBIAN/control
	dpkg-deb --root-owner-group --build $(DIST)/deb $(DEB)

# The same files for `tar -xzf ... -C /usr/local`.
tarball: dist
	rm -rf $(DIST)/tarball
	$(MAKE) install DESTDIR=$(DIST)/tarball PREFIX=/usr/local
	tar -czf $(TARBALL) --owner=0 --group=0 -C $(DIST)/tarball/usr/local bin share
