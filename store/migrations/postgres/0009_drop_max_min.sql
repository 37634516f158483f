-- v1 created max(a, b) and min(a, b) in the store's schema, which may be
-- one the user shares with other applications. The store's statements say
-- greatest and least, and its schema holds nothing but its tables, their
-- indexes and their sequences. A host of an older release still running
-- calls them: upgrade every host of a fleet together (docs/operations.md).
DROP FUNCTION IF EXISTS max(BIGINT, BIGINT);

DROP FUNCTION IF EXISTS min(BIGINT, BIGINT);
