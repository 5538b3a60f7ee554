DROP FUNCTION IF EXISTS claim_limited(text, text[], integer, bigint, text);
ALTER FUNCTION claim_limited_untokened(text, text[], integer, bigint, text) RENAME TO claim_limited;
ALTER TABLE jobs DROP COLUMN IF EXISTS claim_token;
