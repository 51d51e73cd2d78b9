"""Vocabulary of the generated shop catalogue: product types, attributes, options, brands.

Within one product type no two attribute phrases, and no two option values outside 'size' groups,
reach a token-set ratio above 85 (tests/envs/shop/test_shop.py checks this), so a wrong choice never
scores as a right one.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class ProductType:
    noun: str
    query: str
    category: str
    path: str
    attributes: tuple[str, ...]
    options: tuple[tuple[str, tuple[str, ...]], ...]
    price: tuple[float, float]


def _t(noun, query, category, path, attributes, options, price) -> ProductType:
    return ProductType(noun, query, category, path, tuple(attributes.split(", ")),
                       tuple((g, tuple(v.split(", "))) for g, v in options), price)


BEAUTY, GROCERY, FASHION, FURNITURE, ELECTRONICS = (
    "Beauty & Personal Care", "Grocery & Gourmet Food", "Clothing, Shoes & Jewelry", "Home & Kitchen",
    "Electronics")

PRODUCT_TYPES: tuple[ProductType, ...] = (
    _t("hair extension", "hair extensions", "beauty",
       f"{BEAUTY} › Hair Care › Hair Extensions, Wigs & Accessories › Extensions",
       "natural looking, clip-in, heat resistant, tangle free, human hair, double weft, easy to apply",
       [("color", "jet black, dark brown, honey blonde, auburn, platinum, ash grey"),
        ("size", "14 inch, 18 inch, 22 inch, 26 inch")], (15.0, 90.0)),
    _t("shampoo", "shampoo", "beauty", f"{BEAUTY} › Hair Care › Shampoo & Conditioner › Shampoos",
       "sulfate free, paraben free, for dry hair, color safe, tea tree, argan oil, cruelty free",
       [("scent", "lavender, eucalyptus mint, coconut, unscented, citrus"),
        ("size", "8 fl oz, 12 fl oz, 16 fl oz, 33.8 fl oz")], (6.0, 35.0)),
    _t("lipstick", "lipstick", "beauty", f"{BEAUTY} › Makeup › Lips › Lipstick",
       "long lasting, matte finish, moisturizing, vegan formula, smudge proof, highly pigmented, "
       "paraben free",
       [("color", "ruby red, nude pink, berry, coral, mauve, plum"),
        ("size", "1 count, 2 count, 3 count")], (5.0, 30.0)),
    _t("face moisturizer", "face moisturizer", "beauty",
       f"{BEAUTY} › Skin Care › Face › Creams & Moisturizers",
       "hyaluronic acid, fragrance free, for sensitive skin, oil free, spf 30, anti aging, "
       "non comedogenic",
       [("size", "1.7 oz, 2.5 oz, 3.4 oz"), ("style", "day cream, night cream, gel")], (9.0, 60.0)),
    _t("protein bar", "protein bars", "grocery", f"{GROCERY} › Snacks & Sweets › Bars › Protein Bars",
       "gluten free, low sugar, high protein, keto friendly, non gmo, plant based, dairy free",
       [("flavor", "chocolate peanut butter, cookies and cream, salted caramel, mixed berry, "
                   "almond vanilla"),
        ("size", "12 count, 15 count, 24 count")], (12.0, 45.0)),
    _t("ground coffee", "ground coffee", "grocery",
       f"{GROCERY} › Beverages › Coffee, Tea & Cocoa › Coffee › Ground Coffee",
       "dark roast, usda organic, fair trade, single origin, low acid, whole bean, kosher certified",
       [("flavor", "french vanilla, hazelnut, original blend, mocha, caramel"),
        ("size", "12 ounce, 2 pound, 32 ounce")], (8.0, 40.0)),
    _t("herbal tea", "herbal tea", "grocery",
       f"{GROCERY} › Beverages › Coffee, Tea & Cocoa › Tea › Herbal",
       "caffeine free, usda organic, individually wrapped, non gmo, sugar free, kosher certified, "
       "loose leaf",
       [("flavor", "chamomile, peppermint, ginger lemon, rooibos, hibiscus"),
        ("size", "20 count, 40 count, 100 count")], (4.0, 25.0)),
    _t("olive oil", "olive oil", "grocery", f"{GROCERY} › Pantry Staples › Cooking Oils › Olive Oil",
       "extra virgin, cold pressed, first harvest, non gmo, usda organic, glass bottle, single estate",
       [("size", "500 ml, 750 ml, 1 liter, 3 liter")], (9.0, 55.0)),
    _t("running shoes", "running shoes", "fashion",
       f"{FASHION} › Men › Shoes › Athletic › Running",
       "breathable mesh, non slip, memory foam, lightweight, arch support, rubber sole, machine washable",
       [("color", "black white, navy, grey, olive green, charcoal"),
        ("size", "8, 9, 10, 11, 12")], (30.0, 140.0)),
    _t("t-shirt", "t-shirts", "fashion", f"{FASHION} › Men › Clothing › Shirts › T-Shirts",
       "cotton blend, moisture wicking, crew neck, short sleeve, slim fit, tagless, machine wash",
       [("color", "heather grey, navy blue, forest green, maroon, white"),
        ("size", "small, medium, large, x-large, xx-large")], (8.0, 35.0)),
    _t("maxi dress", "maxi dresses", "fashion", f"{FASHION} › Women › Clothing › Dresses › Casual",
       "floral print, v neck, high waist, with pockets, flowy, sleeveless, adjustable straps",
       [("color", "black, dusty rose, sage green, mustard, ivory"),
        ("size", "small, medium, large, x-large")], (20.0, 70.0)),
    _t("beanie hat", "beanie hats", "fashion",
       f"{FASHION} › Men › Accessories › Hats & Caps › Skullies & Beanies",
       "cable knit, fleece lined, one size fits most, warm winter, acrylic yarn, cuffed, unisex",
       [("color", "charcoal, burgundy, cream, mustard, black")], (7.0, 30.0)),
    _t("office chair", "office chairs", "furniture",
       f"{FURNITURE} › Furniture › Home Office Furniture › Home Office Chairs",
       "lumbar support, adjustable height, mesh back, ergonomic, swivel, padded armrests, easy assembly",
       [("color", "black, grey, white, blue")], (60.0, 300.0)),
    _t("bookshelf", "bookshelves", "furniture",
       f"{FURNITURE} › Furniture › Living Room Furniture › Bookcases",
       "5 tier, solid wood, easy assembly, industrial style, space saving, anti tip, open shelves",
       [("color", "rustic brown, walnut, white oak, espresso, black")], (40.0, 220.0)),
    _t("throw pillow cover", "throw pillow covers", "furniture",
       f"{FURNITURE} › Bedding › Decorative Pillows, Inserts & Covers › Throw Pillow Covers",
       "hidden zipper, velvet, machine washable, double sided, farmhouse style, soft touch, fade resistant",
       [("color", "emerald, blush pink, mustard yellow, navy, cream"),
        ("size", "18 x 18 inch, 20 x 20 inch, 12 x 20 inch")], (8.0, 40.0)),
    _t("side table", "side tables", "furniture",
       f"{FURNITURE} › Furniture › Living Room Furniture › Tables › End Tables",
       "storage shelf, solid wood, mid century, round top, easy assembly, metal frame, charging station",
       [("color", "natural, black, white, walnut")], (25.0, 150.0)),
    _t("bluetooth speaker", "bluetooth speakers", "electronics",
       f"{ELECTRONICS} › Portable Audio & Video › Portable Speakers & Docks › Bluetooth Speakers",
       "waterproof, long battery life, stereo pairing, built-in microphone, deep bass, usb c charging, "
       "shockproof",
       [("color", "black, blue, red, camo")], (20.0, 130.0)),
    _t("wireless earbuds", "wireless earbuds", "electronics",
       f"{ELECTRONICS} › Headphones, Earbuds & Accessories › Earbuds",
       "noise cancelling, charging case, sweat resistant, touch control, low latency, hands free calls, "
       "ipx5 waterproof",
       [("color", "black, white, navy, rose gold")], (18.0, 160.0)),
    _t("usb c cable", "usb c cables", "electronics",
       f"{ELECTRONICS} › Computers & Accessories › Cables & Accessories › USB Cables",
       "fast charging, braided nylon, data transfer, durable, gold plated, right angle, tangle free",
       [("size", "3 ft, 6 ft, 10 ft"), ("color", "black, white, grey")], (5.0, 25.0)),
    _t("fitness tracker", "fitness trackers", "electronics",
       f"{ELECTRONICS} › Wearable Technology › Activity & Fitness Trackers",
       "heart rate monitor, sleep tracking, water resistant, step counter, long battery life, "
       "built-in gps, blood oxygen",
       [("color", "black, pink, teal, grey")], (25.0, 180.0)),
)

BRANDS: tuple[str, ...] = tuple(
    "Lumora Vantel Korvi Brisa Oakenly Nimbly Peltra Zenfield Halcyra Quorra Tevoli Marisol Dunhaven "
    "Feroza Glimmet Arvana Sollis Cindral Pravo Wexley Orrin Talvik Yumeko Belcastro".split()
)

FILLERS: tuple[str, ...] = (
    "Backed by a one year satisfaction guarantee",
    "Ships in recyclable packaging",
    "Designed and tested in our own studio",
    "Makes a thoughtful present for friends and family",
    "Quality checked before it leaves the warehouse",
    "Customer support answers within one business day",
)

LEADS: tuple[str, ...] = ("i need", "i am looking for", "i want to buy", "find me", "i'm looking for")
