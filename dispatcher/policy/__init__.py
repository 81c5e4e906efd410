"""The dispatcher's pure core: plain data and the rules applied to it, no I/O, no clock.

- ``model``: what a claim hands out, what an attempt returns, what gets recorded;
- ``signing``: the wire format, Standard Webhooks and CloudEvents, and signatures;
- ``outcome``: what an attempt means for each delivery (delivered, retry, dead);
- ``backoff``: when the next attempt is due;
- ``quota``, ``ratelimit``: how many deliveries each endpoint may claim now.

Every clock reading and random draw is passed in, so each rule is unit-tested
without sleeping.
"""
