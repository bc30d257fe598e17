-- Access tokens signed out before they expire: a console sign-in's token is listed here when
-- its operator signs out, and every node refuses it from then on (the token itself stays
-- valid to its signature, so the refusal has to live in the database). Keyed by the SHA-256
-- of the token's sign-in id (its `sid` claim); a row is useless once the token has expired,
-- and is deleted then.
CREATE TABLE IF NOT EXISTS signed_out_token (
    sign_in_hash   BINARY(32) NOT NULL,
    expires_at_utc BIGINT     NOT NULL,
    PRIMARY KEY (sign_in_hash),
    KEY ix_signed_out_token_expiry (expires_at_utc)
) ENGINE = InnoDB;
