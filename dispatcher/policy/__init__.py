"""The dispatcher's pure core: plain data and the rules applied to it, no I/O, no clock.

- ``model``: what a claim hands out, what an attempt returns, what gets recorded;
- ``signing``: the wire format, Standard Webhooks and CloudEvents, and signatures;
- ``outcome``: what an attempt means for each delivery (delivered, retry, dead);
- ``redact``: secrets an echoing receiver sends back, masked out of ``last_error``;
- ``payload_values``: the payloads' values, and the spellings an answer may give them;
- ``backoff``: when the next attempt is due;
- ``quota``: what one claim asks each endpoint for (the fleet's limits decide in SQL).

Every clock reading and random draw is passed in, so each rule is unit-tested
without sleeping.
"""
