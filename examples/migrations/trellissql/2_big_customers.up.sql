CREATE TRANSFORM IF NOT EXISTS big_customers AS
  SELECT customer, amount FROM customer_totals WHERE amount > 100;
