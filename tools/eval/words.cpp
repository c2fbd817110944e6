#include "eval/words.h"

#include <algorithm>
#include <set>
#include <span>
#include <string>

#include "nanovllm/core/error.h"

namespace nanovllm::eval {
namespace {

// Everyday English words, written for this project (RULER draws its keys from the wonderwords package's
// lists, which we do not ship). Lowercase letters only, so "adjective-noun" keys read like RULER's.
constexpr std::string_view kAdjectives[] = {
    "able",     "acidic",   "active",   "afraid",   "agreeable", "alert",    "alive",    "amused",
    "ancient",  "angry",    "annual",   "anxious",  "aromatic",  "ashamed",  "awake",    "awful",
    "bad",      "bashful",  "basic",    "beautiful", "big",      "bitter",   "black",    "bland",
    "blue",     "blushing", "bold",     "boring",   "brave",     "brief",    "bright",   "brisk",
    "broad",    "broken",   "brown",    "bumpy",    "busy",      "calm",     "careful",  "casual",
    "cheap",    "cheerful", "chilly",   "clean",    "clever",    "cloudy",   "clumsy",   "coarse",
    "cold",     "colorful", "common",   "cool",     "crazy",     "creamy",   "crisp",    "crooked",
    "crowded",  "cruel",    "curious",  "curly",    "damp",      "dark",     "dazzling", "dear",
    "deep",     "delicate", "dense",    "dirty",    "dizzy",     "dry",      "dull",     "dusty",
    "eager",    "early",    "easy",     "elegant",  "empty",     "endless",  "energetic", "equal",
    "exact",    "excited",  "faint",    "fair",     "faithful",  "famous",   "fancy",    "fast",
    "fat",      "fearless", "fierce",   "filthy",   "fine",      "flat",     "fluffy",   "foolish",
    "fragile",  "frail",    "free",     "fresh",    "friendly",  "frozen",   "funny",    "fuzzy",
    "gentle",   "giant",    "gifted",   "glad",     "gloomy",    "glossy",   "golden",   "good",
    "graceful", "grand",    "gray",     "greasy",   "great",     "green",    "grumpy",   "handsome",
    "happy",    "hard",     "harsh",    "healthy",  "heavy",     "helpful",  "hidden",   "high",
    "hollow",   "honest",   "hot",      "huge",     "humble",    "hungry",   "icy",      "idle",
    "immense",  "jolly",    "juicy",    "keen",     "kind",      "large",    "late",     "lazy",
    "light",    "little",   "lively",   "lonely",   "long",      "loose",    "loud",     "lovely",
    "lucky",    "mad",      "magic",    "massive",  "mature",    "mellow",   "merry",    "mighty",
    "mild",     "misty",    "modern",   "moist",    "narrow",    "nasty",    "neat",     "nervous",
    "new",      "nice",     "noisy",    "odd",      "old",       "orange",   "pale",     "perfect",
    "plain",    "pleasant", "plump",    "polite",   "poor",      "precious", "pretty",   "proud",
    "purple",   "quick",    "quiet",    "rapid",    "rare",      "raw",      "red",      "rich",
    "ripe",     "rough",    "round",    "royal",    "rude",      "rusty",    "sad",      "safe",
    "salty",    "scary",    "shallow",  "sharp",    "shiny",     "short",    "shy",      "silent",
    "silly",    "simple",   "slim",     "slow",     "small",     "smart",    "smooth",   "soft",
    "solid",    "sour",     "sparkling", "spicy",   "splendid",  "steady",   "steep",    "sticky",
    "stiff",    "strange",  "strong",   "sturdy",   "sudden",    "sunny",    "super",    "sweet",
    "swift",    "tall",     "tame",     "tasteful", "tasty",     "tender",   "tense",    "thick",
    "thin",     "thirsty",  "tidy",     "tiny",     "tough",     "tricky",   "ugly",     "uneven",
    "upset",    "useful",   "vague",    "vast",     "violet",    "vivid",    "warm",     "wary",
    "weak",     "wealthy",  "weary",    "wet",      "white",     "whole",    "wicked",   "wide",
    "wild",     "windy",    "wise",     "witty",    "wooden",    "worried",  "yellow",   "young",
    "zany",     "zealous",
};

constexpr std::string_view kNouns[] = {
    "account",  "acoustic", "actor",    "airport",  "alarm",     "anchor",   "animal",   "answer",
    "apple",    "apron",    "arch",     "army",     "arrow",    "artist",    "attic",    "autumn",
    "baby",     "badge",    "bakery",   "balance",  "balloon",  "banana",    "band",     "barber",
    "basket",   "bath",     "battery",  "beach",    "bean",     "bear",      "bed",      "bee",
    "bell",     "bicycle",  "bird",     "blanket",  "boat",     "body",      "bone",     "book",
    "boot",     "bottle",   "box",      "brain",    "branch",   "bread",     "brick",    "bridge",
    "brother",  "brush",    "bucket",   "building", "bulb",     "butter",    "button",   "cabin",
    "cable",    "cake",     "camera",   "camp",     "candle",   "canvas",    "captain",  "car",
    "card",     "carpet",   "carrot",   "castle",   "cat",      "cattle",    "cave",     "celery",
    "chain",    "chair",    "chalk",    "channel",  "cheese",   "cherry",    "chicken",  "chimney",
    "church",   "circle",   "city",     "clock",    "cloud",    "coach",     "coast",    "coat",
    "coffee",   "coin",     "collar",   "comb",     "comet",    "copper",    "corn",     "cotton",
    "country",  "cousin",   "cow",      "crab",     "crayon",   "cream",     "crow",     "crown",
    "cup",      "curtain",  "cushion",  "dancer",   "daughter", "desert",    "desk",     "diamond",
    "dinner",   "doctor",   "dog",      "doll",     "donkey",   "door",      "dragon",   "drawer",
    "dream",    "dress",    "drum",     "duck",     "eagle",    "earth",     "egg",      "elbow",
    "engine",   "eye",      "fact",     "fairy",    "farm",     "father",    "feather",  "fence",
    "field",    "finger",   "fire",     "fish",     "flag",     "flame",     "flower",   "flute",
    "fog",      "forest",   "fork",     "fountain", "fox",      "frog",      "fruit",    "furnace",
    "garage",   "garden",   "gate",     "ghost",    "gift",     "giraffe",   "glass",    "glove",
    "goat",     "gold",     "grape",    "grass",    "guitar",   "hammer",    "hand",     "harbor",
    "harp",     "hat",      "hawk",     "heart",    "helmet",   "hill",      "honey",    "horse",
    "hospital", "house",    "island",   "jacket",   "jar",      "jelly",     "jewel",    "journey",
    "judge",    "kettle",   "key",      "king",     "kitchen",  "kite",      "kitten",   "knife",
    "ladder",   "lake",     "lamp",     "lantern",  "leaf",     "lemon",     "letter",   "library",
    "lighthouse", "lion",   "lizard",   "lock",     "machine",  "magnet",    "mailbox",  "map",
    "marble",   "market",   "meadow",   "melody",   "mirror",   "monkey",    "moon",     "morning",
    "mountain", "mouse",    "muffin",   "museum",   "needle",   "nest",      "night",    "notebook",
    "ocean",    "office",   "onion",    "orchard",  "oven",     "owl",       "paint",    "palace",
    "pancake",  "paper",    "parade",   "parrot",   "pasta",    "path",      "peach",    "pear",
    "pebble",   "pencil",   "pepper",   "piano",    "picture",  "pillow",    "pilot",    "pizza",
    "planet",   "plate",    "pocket",   "pond",     "potato",   "pumpkin",   "puzzle",   "queen",
    "quilt",    "rabbit",   "radio",    "rain",     "rainbow",  "river",     "road",     "robot",
    "rocket",   "roof",     "room",     "rope",     "rose",     "sailor",    "salad",    "sand",
    "school",   "scissors", "sea",      "seed",     "shadow",   "sheep",     "shell",    "ship",
    "shoe",     "shop",     "shovel",   "silver",   "singer",   "sister",    "sky",      "snail",
    "snake",    "snow",     "soap",     "sock",     "soup",     "spider",    "spoon",    "spring",
    "squirrel", "stage",    "star",     "station",  "stone",    "storm",     "story",    "stove",
    "street",   "sugar",    "summer",   "sun",      "swan",     "sweater",   "table",    "teacher",
    "temple",   "tent",     "thread",   "thunder",  "ticket",   "tiger",     "toast",    "tomato",
    "tower",    "town",     "toy",      "tractor",  "train",    "tree",      "truck",    "trumpet",
    "tunnel",   "turtle",   "umbrella", "valley",   "vase",     "village",   "violin",   "volcano",
    "wagon",    "wall",     "wallet",   "water",    "whale",    "wheel",     "whistle",  "window",
    "winter",   "wizard",   "wolf",     "wood",     "yard",     "zebra",
};

std::vector<std::string_view> checked(std::span<const std::string_view> words, const char* what) {
  std::vector<std::string_view> out(words.begin(), words.end());
  const std::set<std::string_view> unique(out.begin(), out.end());
  NANOVLLM_CHECK(unique.size() == out.size(), "eval: duplicate ", what);
  return out;
}

}  // namespace

const std::vector<std::string_view>& adjectives() {
  static const std::vector<std::string_view> words = checked(kAdjectives, "adjectives");
  return words;
}

const std::vector<std::string_view>& nouns() {
  static const std::vector<std::string_view> words = checked(kNouns, "nouns");
  return words;
}

}  // namespace nanovllm::eval
