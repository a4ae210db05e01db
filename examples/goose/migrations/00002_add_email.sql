-- +goose Up
ALTER TABLE goose_example_users ADD COLUMN email text;
UPDATE goose_example_users SET email = name || '@example.com';

-- +goose Down
ALTER TABLE goose_example_users DROP COLUMN email;
