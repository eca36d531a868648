-- Safe to run again: a migration interrupted before its version was
-- recorded is run a second time.
CREATE TRANSFORM IF NOT EXISTS customer_totals AS
  SELECT customer, count(*) AS orders, sum(amount) AS amount FROM orders GROUP BY customer;
