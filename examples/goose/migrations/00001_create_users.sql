-- +goose Up
CREATE TABLE goose_example_users (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name text NOT NULL UNIQUE
);
INSERT INTO goose_example_users (name) VALUES ('alice'), ('bob');

-- +goose Down
DROP TABLE goose_example_users;
