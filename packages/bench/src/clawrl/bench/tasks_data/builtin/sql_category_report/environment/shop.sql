CREATE TABLE products (id INTEGER PRIMARY KEY, name TEXT, category TEXT);
CREATE TABLE order_lines (order_id INTEGER, product_id INTEGER, qty INTEGER, unit_price REAL);
INSERT INTO products VALUES (1, 'Kettle', 'kitchen'), (2, 'Toaster', 'kitchen'), (3, 'Desk lamp', 'office'),
  (4, 'Stapler', 'office'), (5, 'Hammock', 'garden'), (6, 'Tent', 'outdoor');
INSERT INTO order_lines VALUES (100, 1, 1, 29.9), (100, 3, 2, 15.5), (101, 2, 1, 45.0), (101, 1, 2, 29.9),
  (102, 4, 10, 2.35), (103, 5, 1, 89.0), (104, 3, 1, 15.5), (104, 4, 1, 2.35);
