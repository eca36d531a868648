DROP TRANSFORM IF EXISTS customer_totals;
