"""Sans-IO unit tests of tidings.protocol and the subject index."""
