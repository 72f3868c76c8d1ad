"""The four synthetic tasks the bundled models learn and the bundled workloads exercise.

Each task is a seeded generator of :class:`Example` (a user prompt, the one correct answer and
the part of the answer that decides accuracy). They were chosen for the study's contrasts:

- ``code``: edit a small Python function (rename a variable or change a constant), prompt in
  InstructCoder's format; the answer copies almost all of the prompt (n-gram's best case);
- ``math``: a two-step word problem solved step by step with column arithmetic (GSM8K-like);
  the answer copies the numbers and names of the prompt and adds digit-by-digit sums;
- ``summary``: extractive summary = the article's first two sentences, prompt in the paper's
  CNN/DailyMail format; the answer is a verbatim copy;
- ``chat``: a greeting and a question on one of a fixed set of topics; the answer is a canned
  reply that appears nowhere in the prompt (model-based drafters' case, n-gram's worst).

Everything is plain Python (no torch): the workloads package uses the same generators.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

TASKS = ("code", "math", "summary", "chat")

NAMES = ("Anna", "Ben", "Carla", "David", "Emma", "Felix", "Grace", "Hugo", "Iris", "Jonas",
         "Kira", "Leo", "Maya", "Nina", "Omar", "Paul", "Rosa", "Sam", "Tara", "Victor")
ITEMS = ("apples", "books", "coins", "cards", "pencils", "stickers", "marbles", "shells")
IDENTIFIERS = ("count", "total", "value", "result", "index", "size", "width", "height", "speed",
               "score", "price", "amount", "offset", "limit", "delta", "level", "weight", "step")
FUNCTIONS = ("compute", "update", "scale", "clamp", "measure", "adjust", "combine", "check")
CITIES = ("Berlin", "Lisbon", "Oslo", "Madrid", "Vienna", "Dublin", "Prague", "Athens", "Warsaw",
          "Zurich", "Milan", "Lyon")
TOPICS = {
    "cats": ("Can you tell me about cats?", "What do you know about cats?",
             ("Cats are small animals that love to sleep in the sun. They are curious and clean, "
             "and many people keep them as pets.")),
    "rain": ("Why does it rain?", "Where does rain come from?",
             ("Rain forms when water vapour in the air cools and turns into drops. When the drops "
             "get heavy, they fall from the clouds.")),
    "coffee": ("How do I make good coffee?", "Any tips for making coffee?",
               ("Use fresh beans and grind them just before brewing. Water that is hot but not "
               "boiling gives the best taste.")),
    "sleep": ("How can I sleep better?", "Do you have tips for better sleep?",
              ("Go to bed at the same time every night and keep the room dark and cool. Avoid "
              "screens for an hour before sleep.")),
    "python": ("What is Python?", "Can you explain what Python is?",
               ("Python is a programming language that is easy to read. People use it for web "
               "sites, data analysis and small scripts.")),
    "moon": ("Why does the moon change shape?", "Why do we see phases of the moon?",
             ("The moon does not change shape. We see different parts of it lit by the sun as it "
             "moves around the earth.")),
    "running": ("How do I start running?", "Any advice for a new runner?",
                ("Start with short runs and walk when you need to. Add a few minutes each week "
                "and rest between runs.")),
    "bread": ("How is bread made?", "Can you explain how to bake bread?",
              ("Mix flour, water, salt and yeast, then let the dough rise. Shape it and bake it "
              "in a hot oven until it is brown.")),
    "plants": ("How often should I water my plants?", "What is the right way to water plants?",
               ("Most plants like water when the top of the soil is dry. Water them slowly and "
               "let the extra water drain away.")),
    "music": ("How can I learn to play the guitar?", "Any tips for learning guitar?",
              ("Practise a little every day and learn a few simple chords first. Play songs you "
              "like so that you stay motivated.")),
    "stars": ("Why do stars twinkle?", "What makes the stars twinkle?",
              ("Stars twinkle because their light passes through moving air. The air bends the "
              "light a little, so the star seems to flicker.")),
    "email": ("How do I write a polite email?", "Can you help me write a polite email?",
              ("Start with a friendly greeting and state your request clearly. Thank the reader "
              "and end with your name.")),
}
CODE_SUFFIX = "Just output the code, do not include any explanation."
SUMMARY_PREFIX = "Could you summarize the following article, please reuse text from the article if possible: "


@dataclass(frozen=True)
class Example:
    """One request: ``prompt`` (the user's message, no chat template), ``reference`` (the
    correct answer) and ``answer`` (what exact-match accuracy compares: the whole reference,
    or for ``math`` the final number)."""

    task: str
    prompt: str
    reference: str
    answer: str


def _code(rng: random.Random) -> Example:
    a, b, v, w = rng.sample(IDENTIFIERS, 4)
    fname = rng.choice(FUNCTIONS)
    n, m, n2 = rng.randint(2, 99), rng.randint(1, 9), rng.randint(2, 99)
    op = rng.choice("+-*")
    shape = rng.randrange(3)
    if shape == 0:
        lines = [f"def {fname}({a}, {b}):", f"    {v} = {a} {op} {b}", f"    if {v} > {n}:",
                 f"        return {v} - {m}", f"    return {v}"]
    elif shape == 1:
        lines = [f"def {fname}({a}, {b}):", f"    {v} = 0", f"    for i in range({a}):",
                 f"        {v} = {v} {op} {b}", f"    if {v} < {n}:", f"        {v} = {n}",
                 f"    return {v}"]
    else:
        lines = [f"def {fname}({a}):", f"    {v} = []", f"    for {b} in {a}:",
                 f"        if {b} % {m + 1} == 0:", f"            {v}.append({b} {op} {n})",
                 f"    return {v}"]
    code = "\n".join(lines)
    if rng.random() < 0.6:
        instruction = f"Rename the variable {v} to {w}."
        edited = "\n".join(_rename(line, v, w) for line in lines)
    else:
        instruction = f"Change the number {n} to {n2}."
        edited = "\n".join(_rename(line, str(n), str(n2)) for line in lines)
    return Example("code", f"{code}\n\n{instruction} {CODE_SUFFIX}", edited, edited)


def _rename(line: str, old: str, new: str) -> str:
    """Replace whole words ``old`` by ``new`` in ``line``."""
    import re

    return re.sub(rf"\b{re.escape(old)}\b", new, line)


def _math(rng: random.Random) -> Example:
    name, friend = rng.sample(NAMES, 2)
    item = rng.choice(ITEMS)
    a, b = rng.randint(10, 59), rng.randint(10, 39)
    c = rng.randint(1, a + b - 1)
    s, r = a + b, a + b - c
    prompt = (f"{name} has {a} {item}. {name} buys {b} more and then gives {c} to {friend}. "
              f"How many {item} does {name} have now?")
    reference = (f"{name} starts with {a} {item}. After buying {b} more, {name} has {a} + {b} {item}: "
                 f"{_add_digits(a, b)}. After giving {c} to {friend}, {name} has {s} - {c} {item}: "
                 f"{_subtract_digits(s, c)}. The answer is {r}.")
    return Example("math", prompt, reference, str(r))


def _add_digits(a: int, b: int) -> str:
    """Column addition of two 2-digit numbers, units first: ``4 + 7 = 11, 1 + 2 + 1 = 4, so 41``."""
    units = a % 10 + b % 10
    carry = units // 10
    tens = a // 10 + b // 10 + carry
    plus = f" + {carry}" if carry else ""
    return f"{a % 10} + {b % 10} = {units}, {a // 10} + {b // 10}{plus} = {tens}, so {a + b}"


def _subtract_digits(x: int, y: int) -> str:
    """Column subtraction ``x - y`` (0 < y < x < 100), units first, borrowing when needed:
    ``11 - 5 = 6, 4 - 1 - 1 = 2, so 26``."""
    xu, xt, yu, yt = x % 10, x // 10, y % 10, y // 10
    if xu >= yu:
        return f"{xu} - {yu} = {xu - yu}, {xt} - {yt} = {xt - yt}, so {x - y}"
    return f"1{xu} - {yu} = {10 + xu - yu}, {xt} - {yt} - 1 = {xt - yt - 1}, so {x - y}"


_SENTENCES = (
    "{person} from {city} opened a small {shop} on {day}.",
    "The {shop} sells fresh {goods} every morning.",
    "{person} said the idea came during a trip to {city2}.",
    "More than {n} people visited the {shop} in the first week.",
    "Local leaders in {city} welcomed the new {shop}.",
    "The {shop} will stay open until {hour} in the evening.",
    "{person} plans to hire {m} more workers next year.",
    "Prices start at {price} euros for a basket of {goods}.",
)
SHOPS = ("bakery", "bookshop", "cafe", "market", "flower shop", "bike shop", "tea house")
GOODS = ("bread", "books", "cakes", "flowers", "fruit", "coffee", "cheese")
DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")


def _summary(rng: random.Random) -> Example:
    city, city2 = rng.sample(CITIES, 2)
    fill = {"person": f"{rng.choice(NAMES)} {rng.choice(('Weber', 'Silva', 'Novak', 'Berg', 'Costa'))}",
                "city": city, "city2": city2, "shop": rng.choice(SHOPS), "goods": rng.choice(GOODS),
                "day": rng.choice(DAYS), "n": rng.randint(100, 999), "hour": rng.randint(6, 11),
                "m": rng.randint(2, 9), "price": rng.randint(3, 19)}
    chosen = rng.sample(_SENTENCES, rng.randint(4, 6))
    sentences = [s.format(**fill) for s in chosen]
    article = " ".join(sentences)
    summary = " ".join(sentences[:2])
    return Example("summary", SUMMARY_PREFIX + article, summary, summary)


def _chat(rng: random.Random) -> Example:
    name = rng.choice(NAMES)
    topic = rng.choice(sorted(TOPICS))
    question = TOPICS[topic][rng.randrange(2)]
    greeting = rng.choice(("Hi!", "Hello!", "Hey there!", "Good morning!"))
    prompt = f"{greeting} My name is {name}. {question}"
    reference = f"Hello {name}! {TOPICS[topic][2]} I hope this helps."
    return Example("chat", prompt, reference, reference)


GENERATORS: dict[str, Callable[[random.Random], Example]] = {
    "code": _code, "math": _math, "summary": _summary, "chat": _chat,
}


def generate(task: str, n: int, seed: int) -> list[Example]:
    """``n`` examples of ``task`` drawn with ``random.Random(seed)`` (the same list every time)."""
    rng = random.Random(f"{task}:{seed}")
    return [GENERATORS[task](rng) for _ in range(n)]


def extract_answer(task: str, text: str) -> str:
    """The part of a model's output that accuracy compares with :attr:`Example.answer`."""
    text = text.strip()
    if task == "math":
        marker = "The answer is "
        at = text.rfind(marker)
        return text[at + len(marker):].rstrip(".").strip() if at >= 0 else ""
    return text
