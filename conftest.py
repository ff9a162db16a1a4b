# Root pytest configuration: the fixtures of the private libvirt hosts and of
# the Kubernetes API test server are available to every test tier.
pytest_plugins = ["tests.integration.virtlab_fixtures", "tests.kubeapi.fixtures"]
