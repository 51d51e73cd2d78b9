"""Shared fixtures of the environment tests."""

from __future__ import annotations

import json

import pytest


@pytest.fixture
def webshop_dir(tmp_path) -> str:
    """`tmp_path` holding small WebShop-format files (see `write_webshop_files`), as a string."""
    write_webshop_files(tmp_path)
    return str(tmp_path)


def write_webshop_files(root) -> None:
    """12 products in WebShop's three file formats (human and synthetic goals, options, a price range)."""
    kinds = [
        ("Nike Air Running Shoe Lightweight", "running shoes",
         "Clothing, Shoes & Jewelry › Men › Shoes › Athletic › Running",
         {"Color": ["Black/White", "Navy"], "Size": ["9", "10", "11"]}, ["lightweight", "rubber sole"]),
        ("Organic Green Tea Bags Caffeine Free", "green tea", "Grocery & Gourmet Food › Beverages › Tea",
         {"Flavor Name": ["Jasmine", "Mint"], "Size": ["20 Count", "100 Count"]}, ["caffeine free"]),
        ("Velvet Throw Pillow Cover Set", "pillow covers", "Home & Kitchen › Bedding › Pillow Covers",
         None, ["hidden zipper", "machine washable"]),
    ]
    products, attrs, human = [], {}, {}
    for i in range(12):
        title, query, path, opts, attributes = kinds[i % 3]
        asin = f"B0TEST{i:04d}"
        products.append({
            "asin": asin, "name": f"{title} Model {i}", "category": query.split()[-1], "query": query,
            "product_category": path, "pricing": "$10.00 - $20.00" if i == 0 else f"${12 + 3 * i}.99",
            "customization_options": None if opts is None else {
                k: [{"value": v, "image": f"https://img/{v}.jpg"} for v in vs] for k, vs in opts.items()},
            "small_description": [f"Bullet for {title}", "Easy care"], "full_description": f"{title}, great.",
            "images": [f"https://img/{asin}.jpg"], "brand": "Brand", "seller_id": "S1"})
        attrs[asin] = {"attributes": attributes, "instruction": f"i want {query} that are {attributes[0]}",
                       "instruction_attributes": attributes[:1]}
        goal_opts = [vs[i % len(vs)].replace("/", " | ").lower() for vs in (opts or {}).values()]
        human[asin] = [{"asin": asin, "instruction": f"i need {query}, {attributes[0]}.",
                        "instruction_attributes": attributes[:1], "instruction_options": goal_opts}]
    products.append({"asin": "nan", "name": "skipped"})
    (root / "items_shuffle_1000.json").write_text(json.dumps(products))
    (root / "items_ins_v2_1000.json").write_text(json.dumps(attrs))
    (root / "items_human_ins.json").write_text(json.dumps(human))
