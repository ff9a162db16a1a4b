"""A real Kubernetes API server for the KubeVirt tests: build (``build``) and run (``lab``) it; see docs/kubelab.md."""
