-- +goose Up
CREATE TABLE orders (id bigint PRIMARY KEY, customer int NOT NULL, amount numeric(12,2) NOT NULL);

-- +goose Down
DROP TABLE orders;
