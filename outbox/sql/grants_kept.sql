
-- Printed for psql, these grants know only the kinds named on the command
-- line: a role that outbox grants recorded with another kind would lose that
-- kind's rights to the REVOKE below. Refuse, and change nothing (--apply,
-- which reads the record, grants every kind a role was given).
DO $kept$
DECLARE
    kept text := (SELECT pg_catalog.string_agg(g.role OPERATOR(pg_catalog.||) ' ('
                                               OPERATOR(pg_catalog.||) g.kind
                                               OPERATOR(pg_catalog.||) ')', ', ')
                  FROM outbox.grantees g
                  WHERE (g.role, g.kind) NOT IN ({named_kinds})
                    AND g.role IN ({role_names}));
BEGIN
    IF kept IS NOT NULL THEN
        RAISE EXCEPTION 'these roles were also granted for other kinds: %; name each of '
                        'them with those options too, or run `outbox grants --apply`, which '
                        'keeps every kind', kept;
    END IF;
END
$kept$;
