-- deferq on PostgreSQL, schema version 9: listing and searching jobs at scale
-- (backends/search.py). A page of a filtered list is one range of one of these,
-- newest (highest seq) first.
CREATE INDEX deferq_jobs_state ON {jobs} (state, seq);
CREATE INDEX deferq_jobs_queue_state ON {jobs} (queue, state, seq);
CREATE INDEX deferq_jobs_task_state ON {jobs} (task, state, seq);

-- Text in the arguments, the error and the unique key: with pg_trgm (where the server has it and we
-- may create it), a trigram index that finds any substring without case (ILIKE);
-- else a full-text index of whole words ('simple': no stemming, no stop words).
-- postgres.py asks which one exists. The expression is the one its queries use.
DO $$
DECLARE
    trgm_schema text;
BEGIN
    BEGIN
        CREATE EXTENSION IF NOT EXISTS pg_trgm;
    EXCEPTION WHEN undefined_file OR insufficient_privilege OR feature_not_supported THEN
        NULL;
    END;
    SELECT n.nspname INTO trgm_schema
    FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'pg_trgm';
    IF trgm_schema IS NOT NULL THEN
        EXECUTE format('CREATE INDEX deferq_jobs_text_trgm ON %s USING gin '
                       '((payload::text || '' '' || coalesce(error, '''') || '' '' || coalesce(unique_key, '''')) '
                       '%I.gin_trgm_ops)', '{jobs}', trgm_schema);
    ELSE
        EXECUTE format('CREATE INDEX deferq_jobs_text_words ON %s USING gin '
                       '(to_tsvector(''simple'', payload::text || '' '' || coalesce(error, '''') || '' '' || '
                       'coalesce(unique_key, '''')))', '{jobs}');
    END IF;
END $$;
