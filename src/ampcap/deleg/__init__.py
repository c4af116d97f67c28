"""RFC 005 delegation, sans-I/O: credentials (COSE_Sign1, EdDSA), scopes and
their narrowing, chain validation in the §6.1 order with an audit record,
revocation state, and the DELEG_* bodies and roles.

Modules: :mod:`.cose` (signature profile, kid), :mod:`.credential`
(payloads), :mod:`.scope` (§4.2, §6.2), :mod:`.chain` (§6.1, the
verifier), :mod:`.revocation` (§6.3, §7), :mod:`.bodies` (§5.4),
:mod:`.service` (issuer, consumer and publisher roles). See
``docs/delegation.md``.
"""
