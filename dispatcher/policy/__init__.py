"""The dispatcher's pure core: plain data and the rules applied to it, no I/O, no clock.

- ``model``: what a claim hands out, what an attempt returns, what gets recorded;
- ``signing``: the wire format, Standard Webhooks and CloudEvents, and signatures;
- ``outcome``: what an attempt means for each delivery (delivered, retry, dead);
- ``redact``: secrets an echoing receiver sends back, masked out of ``last_error``;
- ``payload_values``: the payloads' values, and the spellings an answer may give them;
- ``backoff``: when the next attempt is due;
- ``floors``: where a claim's scan of an endpoint's due rows may start.

The fleet's rules (slots, rate turns, circuit, key order) live in ``dispatcher.limits``.

Every clock reading and random draw is passed in, so each rule is unit-tested
without sleeping.
"""
