"""The profiles shipped with the suite: one YAML file each (see ``korvet.conformance.harness.profile``)."""
