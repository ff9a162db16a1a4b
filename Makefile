# converge.virt: every set-up step and test tier, for a fresh Debian machine as root.
#   make demo   - set everything up and converge a small real fleet on private libvirt hosts
#   make test   - set everything up and run every test tier (units, sanity, lint, typecheck, integration)
.RECIPEPREFIX = >
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
ROOT := $(CURDIR)
BUILD := $(ROOT)/build
VENV := $(ROOT)/.venv
VPY := $(VENV)/bin/python
# pytest imports the collection through this symlink
COLL_LINK := $(BUILD)/collections/ansible_collections/converge/virt
# ansible-test needs a real directory ending in ansible_collections/<ns>/<name>
COLL_COPY := $(BUILD)/ansible-test/ansible_collections/converge/virt
ANSIBLE_TEST_REQS = $(VENV)/lib/python3*/site-packages/ansible_test/_data/requirements
APT_PACKAGES := libvirt-daemon-system libvirt-clients libvirt-dev pkg-config gcc python3-dev qemu-system-x86 qemu-utils openjdk-17-jre-headless \
                busybox-static cpio kmod xz-utils zstd git openssh-server chromium dnsmasq-base mmdebstrap fdisk e2fsprogs
export PYTHONPATH := $(BUILD)/collections
export ANSIBLE_COLLECTIONS_PATH := $(BUILD)/collections
export ANSIBLE_NOCOLOR := 1
export HYPOTHESIS_STORAGE_DIRECTORY := $(BUILD)/hypothesis
# Private libvirt hosts run (and are reached) only inside a network namespace of their own (tools/virtlab/netns.py):
# their TCP listeners have no authentication, so they must not be reachable by the machine's other users.
NETNS := $(VPY) -m tools.virtlab netns --
# What the test tiers and the demo leave behind (ansible's ~/.ansible, molecule's and ansible-compat's caches, the
# modules' bytecode cache) stays in build/, not in the user's home.
LAB_ENV := XDG_CACHE_HOME=$(BUILD)/cache ANSIBLE_HOME=$(BUILD)/ansible-home
# ansible-test keeps its virtual environments and its pip bootstrap script under ~/.ansible/test; a HOME of its own
# (outside the checkout, so clean clones reuse it) keeps our offline pip bootstrap out of every other project's runs.
ANSIBLE_TEST_HOME := $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/converge-virt/ansible-test-home

.PHONY: help setup apt venv layout docs units sanity lint typecheck integration integration-run integration-kube-run molecule molecule-run matrix-setup matrix-run test demo clean guest bench bench-venv docsite docsite-venv

help:
> @echo "make demo   - set up and converge a small real fleet on private libvirt hosts"
> @echo "make test   - set up and run every test tier"
> @echo "make docs   - regenerate docs/states.md from the phase tables"
> @echo "make docsite - build the collection's documentation site (antsibull-docs, Sphinx) into build/docsite"

setup: apt venv layout

# Debian packages: installed only when one is missing, so a warm machine skips apt entirely.
apt:
> @missing=$$(for p in $(APT_PACKAGES); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'ok installed' || echo $$p; done); \
  if [ -n "$$missing" ]; then \
    echo "apt: installing $$missing"; \
    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$missing; \
    if [ -d /run/systemd/system ]; then \
      case " $$(echo $$missing) " in *" openssh-server "*) echo "apt: openssh-server was installed for the lab's private sshds only: the system sshd it started is stopped and disabled"; \
        systemctl disable --now ssh.service ssh.socket || true;; esac; \
    fi; \
  fi

$(VENV)/.stamp: requirements.txt test-requirements.txt
> $(PYTHON) -m venv $(VENV)
> $(VPY) -m pip install -q --upgrade pip
> $(VPY) -m pip install -q -r requirements.txt -r test-requirements.txt
> touch $@

venv: apt $(VENV)/.stamp


layout:
> @mkdir -p $(dir $(COLL_LINK)) && ln -sfn $(ROOT) $(COLL_LINK)
> @rm -rf $(COLL_COPY) && mkdir -p $(COLL_COPY)
> @git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t $(COLL_COPY) 2>/dev/null || true
> @cd $(COLL_COPY) && git init -q . && git add -A . >/dev/null 2>&1 || true

docs: layout
> $(VPY) tools/gen_docs.py

# The documentation site: antsibull-docs sphinx-init writes a Sphinx project into build/docsite, and the build.sh
# it writes renders the collection's plugins and roles (antsibull-docs collection) and builds the HTML
# (sphinx-build -W: any warning fails) into build/docsite/build/html. The intersphinx inventories of the pages it
# refers to (docs.ansible.com, Python, Jinja) are written offline by tools/docsite_inventory.py. antsibull-docs and
# Sphinx live in a virtualenv of their own (tests/docsite/requirements.txt); ansible-doc comes from the .venv.
# kept outside the checkout (a clean clone reuses it), keyed by its requirements file
DOCSITE_VENV := $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/converge-virt/docsite-venv-$(shell sha256sum tests/docsite/requirements.txt | cut -c1-12)
$(DOCSITE_VENV)/.stamp: tests/docsite/requirements.txt
> $(PYTHON) -m venv $(DOCSITE_VENV)
> $(DOCSITE_VENV)/bin/pip install -q -r tests/docsite/requirements.txt
> touch $@

docsite-venv: venv $(DOCSITE_VENV)/.stamp

docsite: docsite-venv layout
> rm -rf $(BUILD)/docsite && mkdir -m 700 $(BUILD)/docsite
> PATH=$(DOCSITE_VENV)/bin:$(VENV)/bin:$$PATH $(DOCSITE_VENV)/bin/antsibull-docs sphinx-init --use-current --dest-dir $(BUILD)/docsite converge.virt
> $(VPY) tools/docsite_inventory.py $(BUILD)/docsite
> PATH=$(DOCSITE_VENV)/bin:$(VENV)/bin:$$PATH $(BUILD)/docsite/build.sh

# ansible-test units: the unit tests as ansible-test runs them (collection loader, controller python)
units: venv layout
> mkdir -p $(ANSIBLE_TEST_HOME)
> cd $(COLL_COPY) && HOME=$(ANSIBLE_TEST_HOME) $(VENV)/bin/ansible-test units --python $$($(VPY) -c 'import sys; print("%d.%d" % sys.version_info[:2])') --color no

# ansible-test installs each sanity test's pinned requirements from PyPI into
# its own virtual environment; only its pip bootstrap (a download from its CI
# file host, unreachable here) is replaced by tools/ansible_test_pip_bootstrap.py.
sanity: venv layout docsite-venv
> @v=$$(grep -hoE "pip='[0-9.]+'" $(VENV)/lib/python3*/site-packages/ansible_test/_internal/python_requirements.py | grep -oE '[0-9.]+'); \
  mkdir -p $(ANSIBLE_TEST_HOME)/.ansible/test/cache && cp tools/ansible_test_pip_bootstrap.py $(ANSIBLE_TEST_HOME)/.ansible/test/cache/get_pip_$${v//./_}.py; \
  old=$$HOME/.ansible/test/cache/get_pip_$${v//./_}.py; if cmp -s tools/ansible_test_pip_bootstrap.py $$old; then rm -f $$old; fi
> cd $(COLL_COPY) && HOME=$(ANSIBLE_TEST_HOME) PATH=$(VENV)/bin:$$PATH $(VENV)/bin/ansible-test sanity --color no \
    --python $$($(VPY) -c 'import sys; print("%d.%d" % sys.version_info[:2])') \
    
# the plugins' and roles' documentation as the docsite renders it: markup, references (to this collection and to
# others), option names and the generated RST (rstcheck); ansible-doc from the project's .venv
> cd $(COLL_LINK) && PATH=$(DOCSITE_VENV)/bin:$(VENV)/bin:$$PATH $(DOCSITE_VENV)/bin/antsibull-docs lint-collection-docs --plugin-docs \
    --validate-collection-refs all --disallow-unknown-collection-refs --check-extra-docs-refs .

lint: venv layout
> cd $(COLL_COPY) && $(VENV)/bin/ansible-lint --profile production --offline -q

# mypy (test-requirements.txt) on the typed layers: every function of _base, _phase and the drivers' protocols
# (_common/driver, volume_driver, host_driver, migrate) must be annotated, and their bodies are checked; modules run on
# Python 3.9 and later (tests/config.yml), so the check targets 3.9
TYPED := $(addprefix -p ansible_collections.converge.virt.plugins.module_utils.,_base _phase) \
         $(addprefix -m ansible_collections.converge.virt.plugins.module_utils._common.,driver volume_driver host_driver migrate) \
         $(addprefix -m ansible_collections.converge.virt.plugins.module_utils.,_common.snapshot_driver _common.provider _libvirt.provider) \
         -m ansible_collections.converge.virt.plugins.module_utils._kubevirt.provider -p ansible_collections.converge.virt.plugins.module_utils._providers
typecheck: venv layout
> cd $(BUILD)/collections && $(VPY) -m mypy --config-file $(ROOT)/tests/mypy.ini --python-version 3.9 --namespace-packages --explicit-package-bases --follow-imports=silent \
    --ignore-missing-imports --disallow-untyped-defs --disallow-incomplete-defs --no-implicit-optional --warn-unused-ignores \
    --cache-dir $(BUILD)/mypy-cache $(TYPED)

# the guest is built from Debian's packages (apt-get download needs package lists)
guest: venv
> @[ -f $(BUILD)/guest/initrd.img ] || apt-cache depends linux-image-amd64 2>/dev/null | grep -q 'Depends: linux-image-' || apt-get update -q
> $(VPY) -m tools.virtlab guest build --cache-dir $(BUILD)/guest
> $(VPY) -m tools.virtlab guest build --login
# the golden image of the cloud-image journey and of make demo: a bootable Debian cloud disk (tools/virtlab/cloudimage.py),
# cached in ~/.cache/converge-virt/cloudimage keyed by its recipe and package versions (cold about 2-3 minutes)
> $(VPY) -m tools.virtlab guest build --cloud

# etcd, kube-apiserver, kube-controller-manager and KubeVirt's/CDI's generated CRDs, built from Go modules
# (with virt-api, virt-controller, kube-scheduler and kwok for `up --controllers real`)
# (Go 1.26, the Go module proxy) into ${XDG_CACHE_HOME:-~/.cache}/converge-virt/kube; only what is missing
# is built (docs/kubelab.md). Standard library only: no virtualenv needed. Exported for every recipe, so the
# tests (run with XDG_CACHE_HOME=build/cache) find the same cache.
export CONVERGE_VIRT_KUBE_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/converge-virt/kube
.PHONY: kube
kube:
> $(PYTHON) -m tools.kubelab build

# the real node of `up --nodes real` (issue 34; docs/kubelab.md "Real node"): Debian's containerd, runc, CNI plugins and
# mmdebstrap, then kubelet, KubeVirt's virt-handler/virt-launcher (cgo), the launcher's tools, pause and container-disk
# (gcc -static) and the node's images (pause, the test guest as a kernel-boot container, virt-launcher: a Debian root file
# system by mmdebstrap from the machine's apt sources; the golden image as a containerDisk), cached like the other parts.
# nftables: virt-handler runs `nft` (from the node's /usr/sbin) to set up a VM's pod network (masquerade). make test
# builds it first in lane 0 (cold 823 s measured on 2026-11-29, cached about 5 s).
NODE_APT_PACKAGES := containerd runc containernetworking-plugins mmdebstrap iproute2 nftables
.PHONY: kube-node
kube-node: guest
> @missing=$$(for p in $(NODE_APT_PACKAGES); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'ok installed' || echo $$p; done); \
  if [ -n "$$missing" ]; then echo "apt: installing $$missing"; apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$missing; fi
> $(PYTHON) -m tools.kubelab build --node

# the AWX lab (issue 38; docs/awx.md): the host's Debian packages tools/awxlab names (`python -m tools.awxlab packages`),
# then receptor, the lab's virtualenv, the wheelhouse, the Debian base image, the collection's EE and its decision
# environment (DE: a base with Java, ansible-rulebook), cached in ~/.cache/converge-virt/awx (cold about 30 minutes, warm
# under a second; the EE and the DE are rebuilt, about 3 minutes each, when the collection changes).
# Not part of make test's set-up; test-awx runs the opt-in mesh tests (tests/integration/test_awx_mesh*.py: faults,
# roles and a fleet through the mesh, the event source in the DE).
.PHONY: awx test-awx
awx: venv
> @missing=$$($(PYTHON) -m tools.awxlab packages --missing); \
  if [ -n "$$missing" ]; then echo "apt: installing" $$missing; apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$missing; fi
> PATH=$(VENV)/bin:$$PATH $(VPY) -m tools.awxlab build
test-awx: awx layout
> $(LAB_ENV) CONVERGE_VIRT_AWX_MESH=1 $(NETNS) $(VPY) -m pytest -q -p no:cacheprovider -rfE --durations=20 tests/integration/test_awx_mesh.py tests/integration/test_awx_mesh_fleet.py tests/integration/test_awx_mesh_de.py

# two pytest-xdist workers (most tests wait on libvirt daemons, guests and ansible processes); each worker has its
# own loopback addresses and ports (tests/integration/virtlab_fixtures.py). Whole files per worker (module-scoped labs
# and fuzz tallies stay on one worker), in argument order: tests/reliability, which holds the longest files, goes first
# so that no long file starts last (xdist's default reorder would queue the files with the fewest tests last); the
# longest files of tests/integration are named first for the same reason (pytest collects each file once); the two halves of
# the interruption campaign come first of all, so that xdist's initial round-robin gives one to each worker.
# The KubeVirt files of tests/integration, the KubeVirt chaos campaign and tests/kubeapi_tests (KUBE_LANE) run apart, in integration-kube-run: make test
# puts them in the second lane, after the matrix (their own Kubernetes stack, network namespace and addresses;
# tests/reliability stays whole, it writes docs/reliability.md).
KUBE_LANE := tests/integration/test_kubevirt_real_controller.py $(filter-out tests/integration/test_kubevirt_real_controller.py \
    $(wildcard tests/integration/test_kubevirt_real_node*.py),$(wildcard tests/integration/test_kubevirt_*.py)) $(wildcard tests/integration/test_kubelab*.py) \
    tests/integration/test_evacuate_role_kubevirt.py tests/integration/test_forged_records_kubevirt.py tests/integration/test_reconcile_kubevirt.py \
    tests/integration/test_lifecycle_rollback_kubevirt.py tests/integration/test_inventory_kubevirt.py tests/chaos/test_campaign_kubevirt.py \
    tests/kubeapi_tests
# the real node's files (KubeVirt's own virt-handler and virt-launcher booting TCG guests under a real kubelet and
# containerd; issue 34, docs/kubelab.md): REAL_NODE_LANE runs in make test, in the second lane after the KubeVirt files
# (real-node-run: one pytest process, one real-node lab at a time; the last file is the two-node lab of issue 37, a live
# migration between two real nodes); test-real-node runs every real-node file
# (REAL_NODE_FILES: also the Debian golden image booted under cloud-init, a TCG boot too long for make test).
# Outside these targets the files skip (CONVERGE_VIRT_REAL_NODE unset), naming them.
REAL_NODE_FILES := $(wildcard tests/integration/test_kubevirt_real_node*.py)
REAL_NODE_LANE := tests/integration/test_kubevirt_real_node.py tests/integration/test_kubevirt_real_node_vm.py \
    tests/integration/test_kubevirt_real_node_faults.py tests/integration/test_kubevirt_real_node_two.py
.PHONY: test-real-node real-node-run
test-real-node: venv layout guest kube kube-node
> $(LAB_ENV) CONVERGE_VIRT_REAL_NODE=1 $(NETNS) $(VPY) -m pytest -q -p no:cacheprovider -rfE --durations=10 $(REAL_NODE_FILES)
real-node-run:
> $(LAB_ENV) CONVERGE_VIRT_REAL_NODE=1 $(NETNS) $(VPY) -m pytest -q -p no:cacheprovider -rfE --durations=10 \
    $(call JUNIT,real-node) $(REAL_NODE_LANE)

# the real node's CSI stack (issue 37 item 4; docs/kubelab.md "Storage and snapshots"): the upstream csi-driver-host-path
# (source committed unmodified under tools/kubelab/csi/: the Go module proxy does not serve it), our registrar, and
# external-provisioner, external-snapshotter's snapshot-controller and csi-snapshotter from their Go modules, cached in
# the kube cache keyed by their inputs. Opt-in (cold about 9 min on 2 loaded cores; cached under a second): not part of
# make test; test-real-node-csi runs the snapshot/restore file against it.
.PHONY: kube-csi test-real-node-csi
kube-csi: kube-node
> $(PYTHON) -m tools.kubelab.csi build
test-real-node-csi: venv layout guest kube kube-node kube-csi
> $(LAB_ENV) CONVERGE_VIRT_REAL_NODE=1 CONVERGE_VIRT_CSI=1 $(NETNS) $(VPY) -m pytest -q -p no:cacheprovider -rfE --durations=10 \
    tests/integration/test_kubevirt_real_node_snapshot.py

integration: venv layout guest kube peers
> @$(MAKE) --no-print-directory integration-run integration-kube-run

# Each pytest tier writes JUnit XML into build/lanes (xunit1: each test names its file), which tools/lanes.py sums per test
# file for the summary at the end of `make test` (build/lanes/summary.txt)
JUNIT = -o junit_family=xunit1 --junitxml=$(BUILD)/lanes/junit-$(1).xml
integration-run:
> $(LAB_ENV) CONVERGE_VIRT_REQUIRE_PEERS=1 $(NETNS) $(VPY) -m pytest -q -p no:cacheprovider -rfE --durations=25 -n 2 --dist loadfile --no-loadscope-reorder \
    $(call JUNIT,integration) \
    $(addprefix --ignore=,$(KUBE_LANE)) \
    tests/reliability/test_interrupt_libvirt.py tests/reliability/test_interrupt_libvirt_late.py tests/reliability tests/chaos tests/integration/test_cloud_image_journey.py tests/integration/test_golden_journey.py tests/integration

integration-kube-run:
> $(LAB_ENV) $(NETNS) $(VPY) -m pytest -q -p no:cacheprovider -rfE --durations=10 -n 2 --dist loadfile --no-loadscope-reorder $(call JUNIT,integration-kube) \
    $(KUBE_LANE)

# a longer randomized chaos campaign (tests/chaos/campaign.py) on three private libvirt hosts: make chaos SEED=7 MINUTES=20
# (the seed reproduces the declarations and faults; the history and the checker's verdict go to build/chaos/seed-<SEED>)
.PHONY: chaos
SEED ?= 1
MINUTES ?= 10
chaos: venv layout
> $(LAB_ENV) $(NETNS) nice -n 10 $(VPY) -m tests.chaos.campaign --seed $(SEED) --minutes $(MINUTES) --out $(BUILD)/chaos

# the peer collections as users get them: the `ansible` package (kubevirt.core, community.libvirt ...) unpacked into
# build/ansible-pkg, outside the virtualenvs, for the contract tests that run them side by side with ours (pip's cache
# keeps later set-ups offline); made outside the private network namespace (pip needs the package index)
PEERS_ANSIBLE := ansible>=12,<13
.PHONY: peers
peers: venv
> @[ -f $(BUILD)/ansible-pkg/.stamp ] && grep -qxF '$(PEERS_ANSIBLE)' $(BUILD)/ansible-pkg/.stamp || {     rm -rf $(BUILD)/ansible-pkg && $(VPY) -m pip install -q --no-deps --target $(BUILD)/ansible-pkg '$(PEERS_ANSIBLE)' &&     echo '$(PEERS_ANSIBLE)' > $(BUILD)/ansible-pkg/.stamp; }

# molecule scenarios of every role that has one (delegated driver, private libvirt hosts)
molecule: venv layout guest
> @$(MAKE) --no-print-directory molecule-run

molecule-run:
> @$(LAB_ENV) $(NETNS) bash -c 'set -e; for scenario in roles/*/molecule/*/molecule.yml; do \
    role=$$(echo $$scenario | cut -d/ -f2); name=$$(echo $$scenario | cut -d/ -f4); \
    echo "molecule: $$role/$$name"; (cd roles/$$role && PATH=$(VENV)/bin:$$PATH $(VENV)/bin/molecule test -s $$name); done'

# the unit tests, both inventories, the secrets canary and a few module tests on every ansible-core the collection
# claims (meta/runtime.yml), one virtualenv each in $(CONVERGE_VIRT_MATRIX_CACHE)/<version>-<digest>, made outside the
# private network namespace (pip needs the package index) and reused while the requirements stay the same (tools/matrix.py);
# MATRIX_VERSIONS="2.16 2.18" runs some of them
.PHONY: matrix
# the matrix virtualenvs, outside the checkout (clean clones reuse them), named by a digest of what they hold
export CONVERGE_VIRT_MATRIX_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/converge-virt/matrix
# 2.19, the .venv's own ansible-core, runs every test in the other tiers; MATRIX_VERSIONS="2.16 2.17 2.18 2.19" runs all four here
MATRIX_VERSIONS ?= 2.16 2.17 2.18
matrix: matrix-setup
> @$(MAKE) --no-print-directory matrix-run

matrix-setup: venv layout guest
> $(VPY) -m tools.matrix --setup-only $(MATRIX_VERSIONS)

matrix-run:
> $(LAB_ENV) $(VPY) -m tools.matrix $(MATRIX_VERSIONS)

# The *-run targets are the tiers without their set-up (which `make test` does first, once): the integration tier
# and molecule in one lane, the matrix and the KubeVirt tiers in another, side by side (tools/lanes.py; molecule moved to
# the first lane on 2026-11-29 to make room for the two-node file in the second). Both lanes mostly wait on guests,
# daemons and ansible processes, and each tier starts its own private network namespace, so they cannot meet.
# tools/lanes.py runs the set-up and the quick tiers first: `setup`, then the Go builds of `make kube` (only the lanes need
# the Kubernetes stack; cold 6-50 min, cached 0.4 s) and then the peers' unpacking beside the guests, units, sanity, lint,
# typecheck and the matrix virtualenvs one after the other (in this order: the unit tests read the cloud-init .deb that `guest` downloads), and ends
# with a summary of every tier's wall time, each lane's total and the slowest test files (build/lanes/summary.txt, from the
# tiers' JUnit files). The real node's parts (`kube-node`: kubelet, virt-handler, virt-launcher, the node's images; cold
# 10-20 min, cached 5 s) are built first in the shorter lane, which absorbs a cold build; the other lane asks again right
# before its real-node tier and, if that build still runs, waits for it (tools/kubelab/build.py build_lock).
test:
> @mkdir -p $(BUILD)/lanes
> $(PYTHON) -m tools.lanes --make $(MAKE) --log-dir $(BUILD)/lanes --first "setup" \
    --first "guest units sanity lint typecheck matrix-setup | kube peers" \
    --junit '$(BUILD)/lanes/junit-*.xml' --junit '$(BUILD)/matrix/*/junit-*.xml' \
    "kube-node molecule-run integration-run" "matrix-run integration-kube-run kube-node real-node-run"
> @echo "make test: all tiers passed"

demo: setup guest
> $(LAB_ENV) $(NETNS) $(VENV)/bin/ansible-playbook -i playbooks/inventory/localhost.yml playbooks/demo.yml
> @mkdir -p $(BUILD)/demo-cloud && printf 'all: {}\n' > $(BUILD)/demo-cloud/guests.converge_libvirt.yml
> $(LAB_ENV) $(NETNS) $(VENV)/bin/ansible-playbook -i playbooks/inventory/localhost.yml -i $(BUILD)/demo-cloud/guests.converge_libvirt.yml playbooks/demo_cloud.yml

# Benchmarks run side by side with the peer collections (the `ansible` package
# from PyPI brings community.libvirt); they are never part of `make test`.
$(BUILD)/bench-venv/.stamp: requirements.txt
> $(PYTHON) -m venv $(BUILD)/bench-venv
> $(BUILD)/bench-venv/bin/pip install -q "ansible-core==$$($(VPY) -c 'import ansible; print(ansible.__version__)')" ansible lxml kubernetes -r requirements.txt
> touch $@

bench-venv: venv layout $(BUILD)/bench-venv/.stamp

bench: bench-venv
> $(NETNS) $(BUILD)/bench-venv/bin/python -m bench.vm_noop --vms 1000 --tasks 20
> $(NETNS) $(BUILD)/bench-venv/bin/python -m bench.volume_converge --volumes 500
> $(NETNS) $(BUILD)/bench-venv/bin/python -m bench.inventory_libvirt --vms 10000 --floor
> $(NETNS) $(BUILD)/bench-venv/bin/python -m bench.migration_vs_virsh
> $(NETNS) $(BUILD)/bench-venv/bin/python -m bench.snapshot_vs_virsh --vms 20
> $(NETNS) $(BUILD)/bench-venv/bin/python -m bench.kubevirt_fleet --vms 50 --state running
> $(NETNS) $(BUILD)/bench-venv/bin/python -m bench.kubevirt_fleet --vms 50 --state stopped
> $(NETNS) $(BUILD)/bench-venv/bin/python -m bench.inventory_kubevirt --vms 5000 --floor
> $(BUILD)/bench-venv/bin/python tools/bench_summary.py

# Mutation testing of the phase logic: cosmic-ray (its own virtualenv, tests/mutation/requirements.txt) mutates each
# plugins/module_utils/_phase/*.py in a private copy under build/mutation, one file after another, niced; every
# mutant runs the _phase unit tests with the project's .venv. Writes docs/mutation.md and fails when a file keeps
# under 95% of its killable mutants. About 20 minutes on two shared cores (docs/mutation.md), so not part of `make test`.
# MUTATION_FILES=status.py limits it to some files; MUTATION_ARGS=--recheck reruns only the survivors of the last run.
.PHONY: mutation
$(BUILD)/mutation-venv/.stamp: tests/mutation/requirements.txt
> $(PYTHON) -m venv $(BUILD)/mutation-venv
> $(BUILD)/mutation-venv/bin/pip install -q -r tests/mutation/requirements.txt
> touch $@

mutation: venv layout $(BUILD)/mutation-venv/.stamp
> nice -n 10 $(BUILD)/mutation-venv/bin/python tools/mutation.py --python $(VPY) $(MUTATION_ARGS) $(MUTATION_FILES)

clean:
> -$(VPY) -m tools.virtlab hosts stop --state-dir $(BUILD)/lab 2>/dev/null
> rm -rf $(BUILD)
