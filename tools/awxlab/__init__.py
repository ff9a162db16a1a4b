"""AWX as AWX runs a job, in a lab: a receptor mesh (a control node, execution nodes in network namespaces of their own),
the collection's execution environment built by ansible-builder, jobs through ``ansible-runner transmit`` ->
``receptorctl work submit`` -> ``ansible-runner process``.  See docs/awx.md."""
