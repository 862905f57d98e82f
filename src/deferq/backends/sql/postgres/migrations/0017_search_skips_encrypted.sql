-- deferq on PostgreSQL, schema version 17: the text index leaves encrypted values out
-- (encryption/envelope.py). Sealed arguments ([[], {"$enc": "$enc:<key>:<base64>"}, ...])
-- and a sealed error ('$enc:...') are random text to a trigram index: nothing a search can
-- find, and many trigrams to write per job. The indexed text is now this function's, which
-- both the index and postgres.py's queries name: one expression, so they always match.
CREATE FUNCTION {schema_prefix}deferq_search_text(payload jsonb, error text, unique_key text)
RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN left(payload -> 1 ->> '$enc', 5) = '$enc:' THEN '' ELSE payload::text END
        || ' ' || CASE WHEN left(error, 5) = '$enc:' THEN '' ELSE coalesce(error, '') END
        || ' ' || coalesce(unique_key, '')
$$;

-- The index of migration 0009 made again over the function, of the same kind: trigrams
-- where pg_trgm is there, else whole words. Existing jobs are indexed as it is built.
DO $$
DECLARE
    trgm_schema text;
BEGIN
    SELECT n.nspname INTO trgm_schema
    FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'pg_trgm';
    IF to_regclass('{schema_prefix}deferq_jobs_text_trgm') IS NOT NULL AND trgm_schema IS NOT NULL THEN
        DROP INDEX {schema_prefix}deferq_jobs_text_trgm;
        EXECUTE format('CREATE INDEX deferq_jobs_text_trgm ON %s USING gin '
                       '({schema_prefix}deferq_search_text(payload, error, unique_key) %I.gin_trgm_ops)',
                       '{jobs}', trgm_schema);
    ELSE
        DROP INDEX IF EXISTS {schema_prefix}deferq_jobs_text_trgm;
        DROP INDEX IF EXISTS {schema_prefix}deferq_jobs_text_words;
        CREATE INDEX deferq_jobs_text_words ON {jobs}
            USING gin (to_tsvector('simple', {schema_prefix}deferq_search_text(payload, error, unique_key)));
    END IF;
END $$;
