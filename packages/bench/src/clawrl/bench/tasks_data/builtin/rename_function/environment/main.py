from shop import pricing
from shop.cart import Cart

cart = Cart()
cart.add(10.0)
cart.add(5.5)
print(cart.total(), pricing.calc_total([1.0], tax=0.0))
