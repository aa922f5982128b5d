-- Every user's token generation: carried in each token it is issued and checked on
-- every request, so deleting a user or changing its password, role or tenant (each
-- bumps it) ends its tokens within seconds. Existing users get a random start, as new
-- ones do (see rules::first_token_generation): tokens issued before this step carry
-- none and are refused, so everyone logs in again once.
ALTER TABLE registry_users ADD COLUMN token_generation BIGINT NOT NULL DEFAULT 0;
UPDATE registry_users SET token_generation = floor(random() * 9007199254740990)::BIGINT + 1;
