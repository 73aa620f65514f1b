# Copyright: specbench contributors
# Apache License 2.0 (see galaxy.yml)
"""The built-in prompt set (``prompts_file: builtin``): written for this project, no download.

Six categories, twelve prompts each (more than a level's streams need to vary: requests take
them in the seeded order of prompts.order). Every prompt of a category opens with the same
words (OPENINGS), so a server that sees only the text (the emulator) can tell the category,
as a real server could not otherwise: the category is in the request's own text, nowhere else.
"""
from __future__ import annotations

OPENINGS = {  # category: how each of its prompts begins
    "code": "Write a Python function",
    "maths": "Solve step by step:",
    "summarisation": "Summarise the following text",
    "translation": "Translate into French:",
    "open_chat": "Let's chat:",
    "retrieval": "Read the documents below and answer",
}

_CODE = ["that returns the n-th Fibonacci number iteratively", "that checks whether a string is a palindrome",
         "that merges two sorted lists into one sorted list", "that parses an ISO 8601 date and returns a datetime",
         "that counts the words in a text file", "that flattens a nested list of any depth",
         "that computes the median of a list of numbers", "that removes duplicate items while keeping order",
         "that validates an IPv4 address given as a string", "that transposes a matrix given as a list of lists",
         "that implements binary search on a sorted list", "that groups a list of records by a key"]
_MATHS = ["a train covers 240 km in 3 hours; how far does it go in 5 hours at the same speed?",
          "find x if 3x + 7 = 31.", "what is the sum of the integers from 1 to 200?",
          "a rectangle has perimeter 50 and width 10; what is its area?",
          "solve the system x + y = 12, x - y = 4.", "what is 15% of 640, then increased by a third?",
          "how many ways can 5 books be arranged on a shelf?", "find the roots of x^2 - 5x + 6 = 0.",
          "a price rises 20% then falls 20%; what is the net change?",
          "what is the probability of two heads in three fair coin tosses?",
          "differentiate f(x) = 3x^3 - 2x + 1.", "compute the compound interest on 1000 at 5% for 3 years."]
_PASSAGES = [
    "The city council met on Tuesday to discuss the new cycling lanes. Residents spoke for and against the plan, "
    "citing safety, parking and the cost of construction. The council voted to run a six-month trial on two streets.",
    "Researchers tested a new battery chemistry that stores more energy per kilogram. Early cells lasted 800 cycles "
    "before losing a fifth of their capacity. The team plans larger cells next year and a pilot line after that.",
    "The museum reopened after a two-year renovation. The new wing adds space for textiles and a room for school "
    "visits. Entry stays free on the first Sunday of each month, and the cafe now serves local produce.",
    "A storm brought heavy rain to the coast overnight. Rivers rose quickly and several roads were closed. Emergency "
    "services evacuated a campsite, and the weather service expects the rain to ease by the afternoon.",
]
_FRENCH = ["The meeting has been moved to Thursday morning.", "Please send me the report before the end of the day.",
           "The train to the airport leaves every twenty minutes.", "We are looking for a flat near the city centre.",
           "My sister works as a nurse in a large hospital.", "Could you recommend a good restaurant nearby?",
           "The weather will be sunny with light winds tomorrow.", "I forgot my umbrella at the office yesterday.",
           "The children played in the garden until dinner.", "This book tells the story of a small fishing village.",
           "Our flight was delayed because of the fog.", "The shop closes early on Saturdays in winter."]
_CHAT = ["what are some good habits for staying focused while working from home?",
         "I'm planning a weekend trip to the mountains. Any tips?", "what's a fun hobby I could start this winter?",
         "how do I keep my houseplants alive when I travel?", "can you suggest a few board games for a family night?",
         "I want to start running. How should I begin?", "what makes a good birthday present for a friend who cooks?",
         "how can I get better at remembering people's names?", "any ideas for a quick vegetarian dinner?",
         "what should I think about before adopting a dog?", "how do I make small talk at a conference?",
         "what are some relaxing things to do on a rainy Sunday?"]
_FACTS = ["The warehouse in Leeds ships orders placed before 2 pm on the same day.",
          "Returns are accepted within 30 days if the item is unused and in its box.",
          "The premium plan includes phone support from 8 am to 8 pm on weekdays.",
          "Invoices are issued on the first working day of each month.",
          "The Berlin office moved to Friedrichstrasse 12 in March.",
          "Software licences renew automatically unless cancelled 14 days before.",
          "Deliveries to islands take two extra working days.",
          "The loyalty scheme gives one point per euro spent, and 100 points are worth 5 euro."]
_QUESTIONS = ["How long do deliveries to islands take?", "When are invoices issued?",
              "What are the support hours on the premium plan?", "Within how many days can items be returned?",
              "Where is the Berlin office now?", "How much are 300 loyalty points worth?",
              "Until what time are orders shipped the same day?", "When must a licence be cancelled to stop renewal?",
              "What does the premium plan include?", "What condition must returned items be in?",
              "Which office moved in March?", "How are loyalty points earned?"]


def _retrieval(i: int) -> str:
    docs = []
    for d in range(6):  # a long input: six documents of filler around the facts, ~900 words
        facts = " ".join(_FACTS[(i + d + k) % len(_FACTS)] for k in range(3))
        docs.append(f"Document {d + 1}. {_PASSAGES[(i + d) % len(_PASSAGES)]} {facts} {_PASSAGES[(i + d + 1) % 4]}")
    return (f"{OPENINGS['retrieval']} the question from them only.\n\n" + "\n\n".join(docs)
            + f"\n\nQuestion: {_QUESTIONS[i]}")


def records() -> list[dict]:
    """The set as prompt records (prompts.py's shape), category by category."""
    texts = {
        "code": [f"{OPENINGS['code']} {t}. Include type hints, a docstring and two doctests." for t in _CODE],
        "maths": [f"{OPENINGS['maths']} {t} Show each step, then give the answer on its own line." for t in _MATHS],
        "summarisation": [f"{OPENINGS['summarisation']} in two sentences.\n\n{_PASSAGES[i % 4]} "
                          f"{_PASSAGES[(i + 1) % 4]}" + (" Keep names and numbers." if i >= 4 else "")
                          + (" Write for a newsletter." if i >= 8 else "") for i in range(12)],
        "translation": [f"{OPENINGS['translation']} \"{t}\"" for t in _FRENCH],
        "open_chat": [f"{OPENINGS['open_chat']} {t}" for t in _CHAT],
        "retrieval": [_retrieval(i) for i in range(12)],
    }
    return [{"messages": [{"role": "user", "content": text}], "category": name, "reply_words": None,
             "output_len": None} for name, items in texts.items() for text in items]
