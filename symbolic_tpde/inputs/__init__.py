"""The input layer: strict readers and validators, and scenario files."""
