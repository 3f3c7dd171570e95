// Cart pricing rules:
// - an item is {name, price, qty}; its line total is price * qty;
// - coupon "SAVE10" gives 10 % off the subtotal; coupon "FLAT5" takes 5 off the subtotal
//   but never below 0; any other coupon (or none) gives no discount;
// - shipping is 4.99 when the subtotal after discount is below 50, else free;
//   an empty cart costs 0 (no shipping);
// - the result is rounded to 2 decimals (Math.round(x * 100) / 100).

function subtotal(items) {
  let sum = 0;
  for (let i = 1; i < items.length; i++) {
    sum += items[i].price;
  }
  return sum;
}

function cartTotal(items, coupon) {
  let total = subtotal(items);
  if (coupon === "SAVE10") total = total - 10;
  if (coupon === "FLAT5") total = total - 5;
  if (total <= 50) total += 4.99;
  return total;
}

module.exports = { subtotal, cartTotal };
