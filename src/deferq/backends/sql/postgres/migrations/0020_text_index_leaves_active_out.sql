-- deferq on PostgreSQL, schema version 20: a claim writes no entry in the text index.
-- Each update of a job that is not HOT (a claim, a settle) put all of its text's
-- trigrams (or words) into the index again; the index now leaves active jobs out, so a
-- claim (queued -> active) writes none. Active jobs are few (those leased now): a search
-- finds them through deferq_jobs_leased and reads their text (queries.sql, find_text).
-- The index keeps its kind (trigrams or words, migrations 0009 and 0017); it is built
-- again here, reading every job once.
DO $$
DECLARE
    trgm_schema text;
BEGIN
    SELECT n.nspname INTO trgm_schema
    FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'pg_trgm';
    IF to_regclass('{schema_prefix}deferq_jobs_text_trgm') IS NOT NULL THEN
        DROP INDEX {schema_prefix}deferq_jobs_text_trgm;
        EXECUTE format('CREATE INDEX deferq_jobs_text_trgm ON %s USING gin '
                       '({schema_prefix}deferq_search_text(payload, error, unique_key) %I.gin_trgm_ops) '
                       'WHERE state <> ''active''', '{jobs}', trgm_schema);
    ELSE
        DROP INDEX {schema_prefix}deferq_jobs_text_words;
        CREATE INDEX deferq_jobs_text_words ON {jobs}
            USING gin (to_tsvector('simple', {schema_prefix}deferq_search_text(payload, error, unique_key)))
            WHERE state <> 'active';
    END IF;
END $$;

-- The planner takes a text condition's selectivity from an expression index's statistics
-- only when the index is not partial: without them it guesses, and may read a whole
-- state's range for a common text where it would have stopped after one page. Statistics
-- of the expression of their own (PostgreSQL 14+) keep the estimates the index gave.
DO $$
BEGIN
    IF current_setting('server_version_num')::int >= 140000 THEN
        EXECUTE 'CREATE STATISTICS {schema_prefix}deferq_jobs_text_stats '
                'ON ({schema_prefix}deferq_search_text(payload, error, unique_key)) FROM {jobs}';
    END IF;
END $$;
ANALYZE {jobs};
